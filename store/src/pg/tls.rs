//! TLS to the PostgreSQL server: what a store URL's `sslmode` and `sslrootcert` ask for, and the
//! rustls connector that does it.
//!
//! The driver knows `sslmode=disable|prefer|require` and refuses every other parameter, while
//! the URLs operators copy from a managed database's console say `verify-full` and name a CA
//! file with `sslrootcert`, as libpq reads them. So the two are taken out of the URL here and the
//! rest is left to the driver. The modes, stricter than libpq's where libpq trusts blindly:
//!
//! * no `sslmode`, or `disable`: no TLS (a private network or a loopback server);
//! * `require`, `verify-ca`, `verify-full`: TLS, and the server's certificate must chain to a
//!   trusted root **and** name the host of the URL. libpq's `require` and `verify-ca` skip one or
//!   both checks; a gateway that holds every session's token and job log does not;
//! * `prefer`: refused. It falls back to plain text whenever the TLS handshake is not offered,
//!   and says nothing, which is a downgrade an attacker on the path can choose.
//!
//! The trusted roots are the file `sslrootcert` names (PEM, one or more certificates), or the
//! system's roots when it names none, or `sslrootcert=system`, as in libpq.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Result, StoreError};

/// How a store connects: the URL for the driver, and the TLS connector when TLS is asked for.
pub(crate) struct Plan {
    /// The URL without the parameters handled here.
    pub(crate) url: String,
    pub(crate) tls: Option<MakeRustlsConnect>,
}

/// Takes `sslmode` and `sslrootcert` out of `url` and builds the connector they ask for.
pub(crate) fn plan(url: &str) -> Result<Plan> {
    let bad = |reason: String| StoreError::BadUrl { reason };
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => return Ok(Plan { url: url.to_string(), tls: None }),
    };
    let mut mode: Option<String> = None;
    let mut rootcert: Option<String> = None;
    // The other parameters go to the driver as they were written: a connection URL decodes
    // `%XX` only (a `+` is a plus, not a space as in a form).
    let mut rest: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || {
            percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map(|v| v.into_owned())
                .map_err(|_| bad(format!("`{key}` is not UTF-8 once decoded")))
        };
        match key {
            "sslmode" => mode = Some(decoded()?),
            "sslrootcert" => rootcert = Some(decoded()?),
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(bad(format!(
                    "`{key}` (a client certificate) is not supported: the store logs in with a password (SCRAM) over TLS"
                )));
            }
            _ => rest.push(pair),
        }
    }
    let rest = rest.join("&");
    let driver_url = if rest.is_empty() { base.to_string() } else { format!("{base}?{rest}") };
    let tls = match mode.as_deref() {
        None | Some("disable") => {
            if rootcert.is_some() {
                return Err(bad("`sslrootcert` is given but TLS is not: add sslmode=verify-full".into()));
            }
            None
        }
        Some("require" | "verify-ca" | "verify-full") => Some(connector(rootcert.as_deref())?),
        Some("prefer" | "allow") => {
            return Err(bad(format!(
                "sslmode={} falls back to an unencrypted connection without saying so; use sslmode=verify-full \
                 (TLS, the server's certificate checked) or sslmode=disable (a private network)",
                mode.unwrap_or_default()
            )));
        }
        Some(other) => {
            return Err(bad(format!(
                "sslmode={other} is not a mode; use verify-full, verify-ca or require (TLS, the certificate checked) or disable"
            )));
        }
    };
    Ok(Plan { url: driver_url, tls })
}

/// A rustls connector that trusts the roots in `rootcert` (a PEM file), or the system's.
fn connector(rootcert: Option<&str>) -> Result<MakeRustlsConnect> {
    let bad = |reason: String| StoreError::BadUrl { reason };
    let mut roots = rustls::RootCertStore::empty();
    match rootcert {
        None | Some("system") => {
            let native = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(native.certs);
            if added == 0 {
                return Err(bad(
                    "TLS was asked for, but this system has no root certificates to check the server's with: \
                     name its CA with sslrootcert=/path/to/ca.pem"
                        .into(),
                ));
            }
        }
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            let path = PathBuf::from(path);
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| bad(format!("sslrootcert {}: cannot read PEM certificates: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(bad(format!("sslrootcert {}: holds no certificate", path.display())));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("sslrootcert {}: a certificate is not valid: {e}", path.display())))?;
            }
        }
    }
    // The provider is named rather than left to rustls' process default: the gateway's tree
    // builds both ring and aws-lc-rs, and rustls then has no default to pick.
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// What to say of a connection that failed because the server's certificate was refused:
/// rustls' reason and the fix; `None` for any other failure.
pub(crate) fn certificate_refused(e: &postgres::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        let found = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|inner| inner.downcast_ref())
        });
        if let Some(refused @ rustls::Error::InvalidCertificate(_)) = found {
            return Some(format!(
                "the server's certificate is not trusted for this host ({refused}); hint: name the CA that signed it \
                 with sslrootcert=/path/to/ca.pem, and connect by a name (or address) the certificate lists"
            ));
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_parameters_mean_no_tls_and_the_url_is_kept() {
        let p = plan("postgres://u:p@h/db").unwrap();
        assert_eq!(p.url, "postgres://u:p@h/db");
        assert!(p.tls.is_none());
        let p = plan("postgres://u:p@h/db?sslmode=disable&application_name=x%20y").unwrap();
        assert_eq!(p.url, "postgres://u:p@h/db?application_name=x%20y");
        assert!(p.tls.is_none());
        let p = plan("postgres://u:p@h/db?options=-c%20a%3Db+c&sslmode=disable").unwrap();
        assert_eq!(p.url, "postgres://u:p@h/db?options=-c%20a%3Db+c", "other parameters are passed as written");
    }

    #[test]
    fn verified_modes_take_their_parameters_out_of_the_drivers_url() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://u@h/db?sslmode={mode}&sslrootcert={}&connect_timeout=3", ca.display());
            let p = plan(&url).unwrap();
            assert_eq!(p.url, "postgres://u@h/db?connect_timeout=3", "{mode}");
            assert!(p.tls.is_some(), "{mode}");
        }
    }

    #[test]
    fn downgrades_typos_and_unreadable_roots_are_refused_with_the_fix() {
        let err = |url: &str| plan(url).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err("postgres://u@h/db?sslmode=prefer").contains("sslmode=verify-full"));
        assert!(err("postgres://u@h/db?sslmode=verify_full").contains("is not a mode"));
        assert!(err("postgres://u@h/db?sslrootcert=/x.pem").contains("add sslmode=verify-full"));
        assert!(
            err("postgres://u@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem").contains("/nonexistent/ca.pem")
        );
        assert!(err("postgres://u@h/db?sslmode=require&sslcert=/c.pem").contains("client certificate"));
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(
            err(&format!("postgres://u@h/db?sslmode=require&sslrootcert={}", empty.display()))
                .contains("no certificate")
        );
    }
}
