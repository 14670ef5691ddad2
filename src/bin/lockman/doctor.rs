//! `lockman doctor`: what this deployment guarantees to locks, one line per check.

use lockman::{Check, CheckStatus, Diagnosis, LockError, LockManager};

use crate::json::{self, json};
use crate::text::clean;
use crate::{Failure, Server, code};

pub async fn doctor(server: &Server, json: bool) -> Result<u8, Failure> {
    let result = diagnose(server, json).await;
    if json && let Err(failure) = &result {
        // A script reading `--json` gets an object whatever happened (the line on stderr too).
        let error = json!({
            "status": "error",
            "error": failure.one_line(),
            "checks": [],
        });
        println!("{}", json::text(&error));
    }
    result
}

async fn diagnose(server: &Server, json: bool) -> Result<u8, Failure> {
    let config = server.config()?;
    let prefix = config.get_name_prefix().to_owned();
    let (diagnosis, unreachable) = match LockManager::start(config).await {
        Ok(manager) => {
            let diagnosis = manager.diagnose().await;
            crate::close(&manager).await;
            (diagnosis.map_err(Failure::redis)?, false)
        }
        Err(e) => refused(e, &prefix)?,
    };
    if json {
        println!("{}", json::text(&to_json(&diagnosis)));
    } else {
        print!("{}", to_text(&diagnosis));
    }
    Ok(match diagnosis.worst() {
        _ if unreachable => code::REDIS,
        CheckStatus::Ok => 0,
        CheckStatus::Warn => code::FREE,
        CheckStatus::Fail => code::UNFIT,
    })
}

/// The report of a start that failed, when the failure is a finding about the deployment: the
/// one check that failed, and whether the server could not be reached at all.
fn refused(e: LockError, prefix: &str) -> Result<(Diagnosis, bool), Failure> {
    let said = crate::said(&e);
    let (check, unreachable) = match &e {
        LockError::Connect { .. } | LockError::Timeout { .. } | LockError::Tls { .. } => (
            Check::new(
                "server",
                CheckStatus::Fail,
                said,
                "check the URL, the port, TLS (--tls-ca) and the network",
            ),
            true,
        ),
        _ if crate::passing_refusal(&e).is_some() => (
            Check::new(
                "server",
                CheckStatus::Fail,
                said,
                "wait until the server is ready (a script ended, its dataset loaded) and run \
                 lockman doctor again",
            ),
            true,
        ),
        LockError::Auth { .. } => (
            Check::new(
                "server",
                CheckStatus::Fail,
                said,
                "check the user and password in the URL (Sentinel: --master-user, --master-password)",
            ),
            true,
        ),
        LockError::ReadOnly { .. } => (
            Check::new(
                "server",
                CheckStatus::Fail,
                said,
                "name the primary, or use --sentinel",
            ),
            false,
        ),
        LockError::NoScripting { .. } => (
            Check::new(
                "scripting",
                CheckStatus::Fail,
                said,
                "load the server's Lua engine (Valkey 9.1: the Lua module), or restore EVALSHA and SCRIPT",
            ),
            false,
        ),
        LockError::NoPermission { .. } => (
            Check::new(
                "acl",
                CheckStatus::Fail,
                said,
                format!(
                    "give the user what every kind needs (docs/protocol.md, \"ACL\"): {}",
                    Diagnosis::least_privilege_acl(prefix)
                ),
            ),
            false,
        ),
        _ => return Err(Failure::redis(e)),
    };
    Ok((Diagnosis::new(vec![check]), unreachable))
}

/// The width of the check names' column.
const NAME_WIDTH: usize = 16;

fn to_text(diagnosis: &Diagnosis) -> String {
    let mut out = String::new();
    for check in &diagnosis.checks {
        out += &format!(
            "{} {:<NAME_WIDTH$} {}\n",
            check.status.symbol(),
            check.name,
            clean(&check.seen)
        );
        if !check.advice.is_empty() && check.status != CheckStatus::Ok {
            out += &format!("  {:<NAME_WIDTH$} → {}\n", "", clean(&check.advice));
        }
    }
    let count = |s: CheckStatus| diagnosis.checks.iter().filter(|c| c.status == s).count();
    out += &format!(
        "{} ok, {} warnings, {} failures\n",
        count(CheckStatus::Ok),
        count(CheckStatus::Warn),
        count(CheckStatus::Fail)
    );
    out
}

fn to_json(diagnosis: &Diagnosis) -> json::Value {
    let checks: Vec<json::Value> = diagnosis
        .checks
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "status": c.status.as_str(),
                "seen": c.seen,
                "advice": c.advice,
            })
        })
        .collect();
    json!({
        "status": diagnosis.worst().as_str(),
        "checks": checks,
    })
}
