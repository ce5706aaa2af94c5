//! `axp-sandbox`: the policy model and Linux enforcement (namespaces, Landlock, seccomp). Being built under issue 3.
