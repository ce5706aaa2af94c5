//! `axp-egress-proxy`: the domain-allowlisting egress proxy. Being built under issue 4.
