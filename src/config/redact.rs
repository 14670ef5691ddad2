//! Passwords kept out of every URL lockman prints, logs or puts in an error.

/// A URL without its password: `redis://user:***@host/0`.
pub(crate) fn redacted(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    // The userinfo ends at the last '@' before the path (a password may contain '@' or '/').
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_owned(); // a user name alone
    };
    let user = &userinfo[..colon];
    format!("{}://{user}:***@{}", &url[..scheme_end], &rest[at + 1..])
}
