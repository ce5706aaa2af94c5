//! Capability tokens: `cap.attenuate` hands out a child token that holds one tool and nothing
//! else — it sees and may use that tool, and every call outside its grants (another tool,
//! `proc.spawn`, a wider token) is refused with -32002 CapabilityDenied naming the missing grant;
//! and a forged token is refused with -32001 Unauthorized.

use serde_json::{Value, json};

use super::catalog::describe_tool;
use super::{Runner, check_log, missing};
use crate::report::{Stop, Verdict, ensure};
use crate::wire::{Conn, describe};

impl Runner {
    /// The child's connection: its token alone, no session id (a sub-agent holds nothing more).
    fn child_conn(&self) -> Result<(Conn, String), Stop> {
        let (token, tool) = self.child.clone().ok_or_else(|| {
            Stop::Skip(if self.session.is_none() {
                self.no_session.clone()
            } else {
                "cap.attenuate gave no child token".into()
            })
        })?;
        Ok((Conn::new(&self.opts.url, self.opts.timeout).with_token(None, &token), tool))
    }

    /// `cap.attenuate` of the session's token to `tool(X)`, X a listed tool (one other than the
    /// tool the job checks call, when there is one): the child's index lists X alone, it may
    /// describe X, and when X is the called tool, it may run it.
    pub(super) async fn attenuate(&mut self) -> Verdict {
        let listing = self.listed()?;
        let s = self.session.as_ref().ok_or_else(|| Stop::Skip(self.no_session.clone()))?;
        let parent = s.open.cap_token.clone();
        let called = self.tool.as_ref().map(|t| t.name.clone());
        let available = || listing.iter().filter(|t| !t.unavailable);
        let x = available()
            .find(|t| Some(&t.name) != called.as_ref())
            .or_else(|| available().next())
            .map(|t| t.name.clone())
            .ok_or_else(|| Stop::Skip("no available tool is listed to attenuate a token to".into()))?;
        let grant = format!("tool({x})");
        let mut c = self.conn()?;
        let r = c.ok("cap.attenuate", json!({"cap_token": parent, "capabilities": [grant], "ttl_s": 300})).await?;
        let child = r
            .get("cap_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| super::no_field("cap.attenuate", "cap_token", &r))?
            .to_string();
        ensure(child != parent, || "cap.attenuate answered the parent token itself".into())?;
        self.child = Some((child, x.clone()));
        let (mut sub, _) = self.child_conn()?;
        let idx = sub.ok("axp.index", json!({"limit": 500})).await?;
        let names: Vec<&str> =
            idx["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        ensure(names == [x.as_str()] && idx["total"] == 1, || {
            format!("the child's index lists {names:?} (total {}), not {x} alone", idx["total"])
        })?;
        describe_tool(&mut sub, &x).await?;
        let mut detail = format!("child token of {grant}: its index lists {x} alone, it may describe {x}");
        if let Some(t) = self.tool.clone().filter(|t| t.name == x) {
            let r = sub.ok("job.start", json!({"tool": t.name, "arguments": t.arguments})).await?;
            let id = r["job_id"].as_str().unwrap_or_default().to_string();
            let events = self.follow(&mut sub, &id, 0, None).await?;
            let exit = check_log(&id, &events)?;
            ensure(exit["state"] == "exited", || format!("the child's call of {x} ended {exit}"))?;
            detail.push_str(" and run it");
        }
        Ok(detail)
    }

    /// Everything outside the child's one grant is refused with -32002 and `data.missing` naming
    /// the grant: another listed tool (described, and started when it is the tool the runner
    /// calls), and a command job.
    pub(super) async fn attenuated_denied(&mut self) -> Verdict {
        let (mut sub, x) = self.child_conn()?;
        let listing = self.listed()?;
        let mut refused = Vec::new();
        let expect = |e: &axp_protocol::RpcError, grant: &str, what: &str| -> Result<(), Stop> {
            ensure(e.code == -32002 && missing(e) == Some(grant), || {
                format!("{what} got {} (data.missing {:?}), not -32002 naming {grant}", describe(e), missing(e))
            })
        };
        if let Some(t) = self.tool.clone().filter(|t| t.name != x) {
            let e = sub.err("job.start", json!({"tool": t.name, "arguments": t.arguments})).await?;
            let grant = format!("tool({})", t.name);
            expect(&e, &grant, &format!("job.start of {} with the child token", t.name))?;
            refused.push(format!("job.start {}", t.name));
        }
        if let Some(y) = listing.iter().find(|t| t.name != x).map(|t| t.name.clone()) {
            let e = sub.err("axp.describe", json!({"name": y})).await?;
            expect(&e, &format!("tool({y})"), &format!("axp.describe {y} with the child token"))?;
            refused.push(format!("axp.describe {y}"));
        }
        let e = sub.err("job.start", json!({"command": ["true"]})).await?;
        expect(&e, "proc.spawn", "a command job with the child token")?;
        let had = self.session.as_ref().is_some_and(|s| s.spawn);
        refused.push(format!("job.start command{}", if had { " (the parent holds proc.spawn)" } else { "" }));
        Ok(format!("-32002 CapabilityDenied with the grant named for: {}", refused.join(", ")))
    }

    /// The child cannot widen its own token again: `cap.attenuate` of it to `tool(*)` is -32002.
    pub(super) async fn attenuated_widen(&mut self) -> Verdict {
        let (mut sub, _) = self.child_conn()?;
        let (token, _) = self.child.clone().ok_or_else(|| Stop::Skip("no child token".into()))?;
        let e = sub.err("cap.attenuate", json!({"cap_token": token, "capabilities": ["tool(*)"]})).await?;
        ensure(e.code == -32002, || format!("widening the child token got {} instead of -32002", describe(&e)))?;
        Ok(format!("cap.attenuate of the child to tool(*): {}", describe(&e)))
    }

    /// A token with one character changed, with and without its session id, and a made-up
    /// token are each refused with -32001 Unauthorized.
    pub(super) async fn forged_token(&mut self) -> Verdict {
        let s = self.session.as_ref().ok_or_else(|| Stop::Skip(self.no_session.clone()))?;
        let mut forged = s.open.cap_token.clone();
        let last = forged.pop().unwrap_or('A');
        forged.push(if last == 'A' { 'B' } else { 'A' });
        let cases = [
            ("the session's token with its last character changed", Some(s.open.session_id.clone()), forged.clone()),
            ("the same without the session id", None, forged),
            ("a made-up token", None, "axp0.axp-conformance-forged".to_string()),
        ];
        for (what, sid, token) in cases {
            let mut c = Conn::new(&self.opts.url, self.opts.timeout).with_token(sid.as_deref(), &token);
            let e = c.err("axp.index", json!({})).await.map_err(|why| format!("{what}: {why}"))?;
            ensure(e.code == -32001, || format!("{what} got {} instead of -32001 Unauthorized", describe(&e)))?;
        }
        Ok("a tampered token (with and without its session id) and a made-up one: -32001 Unauthorized".into())
    }
}
