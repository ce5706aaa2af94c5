//! Small shared helpers of the gateway: the clock (`axp_protocol::now_ms`), the conversion of an
//! internal failure into an error that logs the detail and hides it from callers, random ids,
//! RFC 3339 times, and the typed read-modify-write of a file replicas share.

use axp_protocol::RpcError;

pub use axp_protocol::now_ms;

/// Logs `err` with its context and returns a caller-safe `InternalError`.
pub fn internal(context: &str, err: impl std::fmt::Display) -> RpcError {
    tracing::error!(%err, "{context}");
    RpcError::internal(format!("the gateway failed while {context}; see the gateway log"))
}

/// A failed job-store operation as callers see it. When the database cannot be reached (a
/// replica's PostgreSQL is down or cut off) it says so plainly, since the caller can retry
/// shortly or go to another replica; any other failure is an [`internal`] error.
pub fn store_error(context: &str, err: axp_store::StoreError) -> RpcError {
    if !err.is_unavailable() {
        return internal(context, err);
    }
    tracing::warn!(error = %err, "{context}: the job store is unreachable");
    RpcError::new(
        axp_protocol::ErrorCode::InternalError,
        format!(
            "the job store (the database this gateway shares with its replicas) cannot be reached while {context}: \
             retry shortly, or on another replica"
        ),
    )
    .with_data("store", "unavailable")
}

/// `n` random bytes as base64url (no padding): nonces, session ids, bearer tokens.
pub fn random_b64(n: usize) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = (0..n).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// RFC 3339 UTC time, with milliseconds, of `ms` since the epoch (`axp audit` lines, MCP task
/// times). Hand-rolled (Howard Hinnant's civil-from-days) to avoid a date crate for two uses.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms % 1000
    )
}

/// Changes the file replicas share as `name` (in a PostgreSQL store), read as a `T`: `parse`s
/// what the database holds (nothing: `T::default()`), applies `change`, and writes `render` of
/// the result unless it is unchanged, all under the row's lock. Returns the file as it is then,
/// parsed, with its version (0: none recorded). `Ok(Err(reason))`: what the database holds does
/// not parse, and nothing was written.
pub fn update_shared_as<T: Clone + Default + PartialEq + Send + 'static>(
    store: &axp_store::Store,
    name: &str,
    parse: fn(&[u8]) -> Result<T, String>,
    render: fn(&T) -> Option<String>,
    change: impl FnOnce(&mut T) + Send + 'static,
) -> Result<Result<(T, u64), String>, axp_store::StoreError> {
    let unreadable: std::sync::Arc<std::sync::Mutex<Option<String>>> = std::sync::Arc::default();
    let seen = unreadable.clone();
    let written = store.update_shared(
        name,
        Box::new(move |now| {
            let mut value = match now.map(parse).transpose() {
                Ok(v) => v.unwrap_or_default(),
                Err(e) => {
                    *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                    return None;
                }
            };
            let before = value.clone();
            change(&mut value);
            if value == before {
                return None;
            }
            render(&value).map(String::into_bytes)
        }),
    )?;
    if let Some(e) = unreadable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        return Ok(Err(e));
    }
    Ok(match written {
        None => Ok((T::default(), 0)),
        Some(f) => parse(&f.body).map(|v| (v, f.version)),
    })
}
