//! Token tests against the real format and real HMACs: round trips, offline attenuation by a
//! holder who has only the token string, every kind of rejection with its specific error, the
//! revocation set, the cache, inspection, the key file, and property tests that no sequence of
//! attenuations — honest or hand-crafted — ever widens a grant.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use axp_caps::{
    AttenuateError, KEY_FILE_NAME, KeyError, MAX_BLOCKS, Minter, REVOCATIONS_FILE_NAME, RevocationError, Token,
    TokenError, Verifier, attenuate, inspect, load_or_create_root_key, load_root_key,
};
use axp_protocol::{Capability, CapabilitySet};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use proptest::prelude::*;
use sha2::Sha256;

const KEY: [u8; 32] = [7; 32];
const NOW: u64 = 1_000_000;
const EXP: u64 = 2_000_000;

fn caps(items: &[&str]) -> CapabilitySet {
    CapabilitySet::parse_all(items).unwrap()
}

fn root_caps() -> CapabilitySet {
    caps(&["fs.write(/w)", "net.connect(*.example.com)", "tool(github__*)", "proc.spawn", "pty.open"])
}

fn mint() -> Token {
    Minter::new(KEY).mint("s_one", &root_caps(), EXP)
}

/// The holder's view: split a token string into its parts.
fn parts(t: &str) -> Vec<String> {
    t.strip_prefix("axp1.").unwrap().split('.').map(str::to_string).collect()
}

fn join(parts: &[String]) -> String {
    format!("axp1.{}", parts.join("."))
}

/// Appends a block with a correct MAC but arbitrary content, as a malicious holder could: the
/// holder knows the tag, so the chain verifies; only the covering check can stop it.
fn append_raw_block(token: &str, block_json: &str) -> String {
    let mut p = parts(token);
    let tag = URL_SAFE_NO_PAD.decode(p.pop().unwrap()).unwrap();
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&tag).unwrap();
    m.update(block_json.as_bytes());
    let new_tag = m.finalize().into_bytes();
    p.push(URL_SAFE_NO_PAD.encode(block_json.as_bytes()));
    p.push(URL_SAFE_NO_PAD.encode(new_tag));
    join(&p)
}

#[test]
fn minted_token_round_trips_and_verifies() {
    let t = mint();
    let s = t.to_string();
    assert!(s.starts_with("axp1."), "{s}");
    assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)), "not URL-safe: {s}");
    assert_eq!(Token::parse(&s).unwrap(), t);
    assert_eq!(Token::parse(&s).unwrap().to_string(), s);
    let v = Verifier::new(KEY).verify(&s, NOW).unwrap();
    assert_eq!(v.session_id, "s_one");
    assert_eq!(v.caps, root_caps());
    assert_eq!(v.expires_ms, EXP);
    assert_eq!(v.depth, 0);
    assert_eq!(v.token_id, v.root_id);
    assert_eq!(v.token_id.len(), 32);
    // Two mints never share an id.
    assert_ne!(mint().token_id(), t.token_id());
}

#[test]
fn holder_without_key_attenuates_offline_and_the_child_verifies() {
    let parent_str = mint().to_string();
    // The holder has only the string; no Minter, no key.
    let parent = Token::parse(&parent_str).unwrap();
    let child = attenuate(&parent, &caps(&["fs.read(/w/src)", "tool(github__list_*)"]), Some(EXP - 10)).unwrap();
    let grandchild = child.attenuate(&caps(&["tool(github__list_issues)"]), None).unwrap();
    let verifier = Verifier::new(KEY);
    let v = verifier.verify(&child.to_string(), NOW).unwrap();
    assert_eq!(v.caps, caps(&["fs.read(/w/src)", "tool(github__list_*)"]));
    assert_eq!(v.depth, 1);
    assert_eq!(v.expires_ms, EXP - 10);
    assert_eq!(v.session_id, "s_one");
    assert_eq!(v.root_id, parent.token_id());
    assert_ne!(v.token_id, v.root_id);
    let g = verifier.verify(&grandchild.to_string(), NOW).unwrap();
    assert_eq!(g.depth, 2);
    assert_eq!(g.expires_ms, EXP - 10, "inherits the parent's expiry");
    assert!(g.caps.allows_tool("github__list_issues"));
    assert!(!g.caps.allows_tool("github__list_prs"));
    assert_eq!(g.chain_ids.len(), 3);
    // The parent stays valid and as wide as before.
    assert_eq!(verifier.verify(&parent_str, NOW).unwrap().caps, root_caps());
}

#[test]
fn attenuation_refuses_widening_and_names_the_grant() {
    let parent = mint();
    let err = attenuate(&parent, &caps(&["fs.read(/w/a)", "fs.write(/etc)", "tool(*)"]), None).unwrap_err();
    assert_eq!(err, AttenuateError::Widening { grant: "fs.write(/etc)".parse().unwrap() });
    assert!(err.to_string().contains("fs.write(/etc)"), "{err}");
    let narrow = attenuate(&parent, &caps(&["tool(github__x)"]), None).unwrap();
    // A child cannot regain what its parent dropped.
    let err = attenuate(&narrow, &caps(&["proc.spawn"]), None).unwrap_err();
    assert_eq!(err, AttenuateError::Widening { grant: Capability::ProcSpawn });
    let err = attenuate(&parent, &caps(&[]), Some(EXP + 1)).unwrap_err();
    assert_eq!(err, AttenuateError::ExpiryExtended { parent_ms: EXP, asked_ms: EXP + 1 });
}

#[test]
fn chains_are_bounded_in_depth() {
    let mut t = mint();
    for _ in 1..MAX_BLOCKS {
        t = t.attenuate(&caps(&["proc.spawn"]), None).unwrap();
    }
    assert_eq!(t.depth(), MAX_BLOCKS - 1);
    Verifier::new(KEY).verify(&t.to_string(), NOW).unwrap();
    assert_eq!(t.attenuate(&caps(&["proc.spawn"]), None).unwrap_err(), AttenuateError::TooDeep);
    // A hand-made 17th block is refused before any MAC work.
    let long = append_raw_block(&t.to_string(), r#"{"id":"00000000000000000000000000000000","exp":1,"caps":[]}"#);
    assert!(matches!(Verifier::new(KEY).verify(&long, NOW), Err(TokenError::Malformed(_))));
}

#[test]
fn every_single_character_change_is_rejected() {
    let s = mint().attenuate(&caps(&["fs.read(/w)"]), None).unwrap().to_string();
    let verifier = Verifier::new(KEY);
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut forged = 0;
    for i in 0..s.len() {
        for &replacement in b"Az_." {
            let mut bytes = s.clone().into_bytes();
            if bytes[i] == replacement {
                continue;
            }
            bytes[i] = replacement;
            let changed = String::from_utf8(bytes).unwrap();
            match verifier.verify(&changed, NOW) {
                Err(TokenError::Forged) => forged += 1,
                Err(TokenError::Malformed(_)) => {}
                other => panic!("changing byte {i} to {replacement} gave {other:?}"),
            }
        }
        // Inside the base64 body, a change to another alphabet character always decodes, so it
        // must be caught by the MAC, not by luck of the parser.
        if i >= 5 && s.as_bytes()[i] != b'.' {
            let mut bytes = s.clone().into_bytes();
            let pos = alphabet.iter().position(|&c| c == bytes[i]).unwrap();
            bytes[i] = alphabet[pos ^ 1];
            let changed = String::from_utf8(bytes).unwrap();
            let r = verifier.verify(&changed, NOW);
            assert!(matches!(r, Err(TokenError::Forged) | Err(TokenError::Malformed(_))), "byte {i}: {r:?}");
        }
    }
    assert!(forged > s.len(), "most changes must be caught by the MAC: {forged}");
}

#[test]
fn swapped_mac_foreign_key_removed_and_reordered_blocks_are_forged() {
    let verifier = Verifier::new(KEY);
    let a = mint().to_string();
    let b = mint().to_string();
    // Swap the MAC of two genuine tokens.
    let (mut pa, pb) = (parts(&a), parts(&b));
    *pa.last_mut().unwrap() = pb.last().unwrap().clone();
    assert_eq!(verifier.verify(&join(&pa), NOW), Err(TokenError::Forged));
    // Minted with another key.
    let foreign = Minter::new([8; 32]).mint("s_one", &root_caps(), EXP).to_string();
    assert_eq!(verifier.verify(&foreign, NOW), Err(TokenError::Forged));
    // Removing an attenuation block (keeping the child's MAC) or reordering blocks.
    let child = Token::parse(&a).unwrap().attenuate(&caps(&["tool(github__a)"]), None).unwrap();
    let grandchild = child.attenuate(&caps(&["tool(github__a)"]), None).unwrap().to_string();
    let mut p = parts(&grandchild);
    p.remove(1);
    assert_eq!(verifier.verify(&join(&p), NOW), Err(TokenError::Forged));
    let mut p = parts(&grandchild);
    p.swap(1, 2);
    assert_eq!(verifier.verify(&join(&p), NOW), Err(TokenError::Forged));
    // A child's MAC on its parent's blocks (dropping the restriction) does not verify either.
    let mut p = parts(&child.to_string());
    let child_tag = p.pop().unwrap();
    p.pop();
    p.push(child_tag);
    assert_eq!(verifier.verify(&join(&p), NOW), Err(TokenError::Forged));
}

#[test]
fn an_edited_grant_is_forged() {
    let verifier = Verifier::new(KEY);
    let narrow = Minter::new(KEY).mint("s_one", &caps(&["fs.read(/w/docs)"]), EXP);
    let s = narrow.to_string();
    let mut p = parts(&s);
    let block = String::from_utf8(URL_SAFE_NO_PAD.decode(&p[0]).unwrap()).unwrap();
    for (from, to) in [
        ("fs.read(/w/docs)", "fs.write(/)"),
        ("\"exp\":2000000", "\"exp\":9000000"),
        ("\"sid\":\"s_one\"", "\"sid\":\"s_two\""),
    ] {
        assert!(block.contains(from), "{block}");
        p[0] = URL_SAFE_NO_PAD.encode(block.replace(from, to));
        assert_eq!(verifier.verify(&join(&p), NOW), Err(TokenError::Forged));
    }
}

#[test]
fn hand_crafted_widening_blocks_with_valid_macs_are_refused() {
    let verifier = Verifier::new(KEY);
    let s = mint().to_string();
    let wider =
        append_raw_block(&s, r#"{"id":"00000000000000000000000000000001","exp":1500000,"caps":["fs.write(/)"]}"#);
    match verifier.verify(&wider, NOW) {
        Err(TokenError::Widened { depth: 1, detail }) => {
            assert!(detail.contains("fs.write(/)"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    let later =
        append_raw_block(&s, r#"{"id":"00000000000000000000000000000001","exp":2000001,"caps":["proc.spawn"]}"#);
    assert!(matches!(verifier.verify(&later, NOW), Err(TokenError::Widened { depth: 1, .. })));
    // A holder cannot re-bind the token to another session or key in a later block.
    let rebind = append_raw_block(&s, r#"{"id":"00000000000000000000000000000001","sid":"s_two","exp":1,"caps":[]}"#);
    assert!(matches!(verifier.verify(&rebind, NOW), Err(TokenError::Malformed(_))));
    // Ids must look like ids (they go into the revocation list).
    let bad_id = append_raw_block(&s, r#"{"id":"x\ny","exp":1,"caps":[]}"#);
    assert!(matches!(verifier.verify(&bad_id, NOW), Err(TokenError::Malformed(_))));
    // Unknown fields are refused, never ignored.
    let unknown = append_raw_block(&s, r#"{"id":"00000000000000000000000000000001","exp":1,"caps":[],"admin":true}"#);
    assert!(matches!(verifier.verify(&unknown, NOW), Err(TokenError::Malformed(_))));
    // The same machinery with an honest block works: the helper itself is sound.
    let honest =
        append_raw_block(&s, r#"{"id":"00000000000000000000000000000001","exp":1500000,"caps":["fs.read(/w/x)"]}"#);
    assert_eq!(verifier.verify(&honest, NOW).unwrap().depth, 1);
}

#[test]
fn every_truncation_is_rejected() {
    let s = mint().attenuate(&caps(&["tool(github__a)"]), None).unwrap().to_string();
    let verifier = Verifier::new(KEY);
    for n in 0..s.len() {
        let r = verifier.verify(&s[..n], NOW);
        assert!(matches!(r, Err(TokenError::Forged) | Err(TokenError::Malformed(_))), "prefix of {n} bytes: {r:?}");
    }
}

#[test]
fn malformed_inputs_say_why() {
    let verifier = Verifier::new(KEY);
    for bad in ["", "axp0.abc", "axp1.", "axp1.abc", "axp1.!!!.AAAA", "Bearer axp1.x.y"] {
        match verifier.verify(bad, NOW) {
            Err(TokenError::Malformed(why)) => assert!(!why.is_empty()),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let huge = format!("axp1.{}.AAAA", "A".repeat(20_000));
    assert!(matches!(verifier.verify(&huge, NOW), Err(TokenError::Malformed(_))));
}

#[test]
fn expiry_is_checked_on_every_call_also_when_cached() {
    let verifier = Verifier::new(KEY);
    let t = mint();
    let child = t.attenuate(&caps(&["proc.spawn"]), Some(NOW + 5)).unwrap().to_string();
    assert!(verifier.verify(&child, NOW).is_ok());
    assert_eq!(verifier.cached(), 1);
    assert_eq!(verifier.verify(&child, NOW + 5), Err(TokenError::Expired { expires_ms: NOW + 5 }));
    assert_eq!(verifier.verify(&t.to_string(), EXP), Err(TokenError::Expired { expires_ms: EXP }));
    assert!(verifier.verify(&t.to_string(), EXP - 1).is_ok());
}

#[test]
fn revoking_a_parent_revokes_its_children_and_not_the_reverse() {
    let verifier = Verifier::new(KEY);
    let root = mint();
    let child = root.attenuate(&caps(&["tool(github__*)"]), None).unwrap();
    let grandchild = child.attenuate(&caps(&["tool(github__a)"]), None).unwrap();
    let sibling = root.attenuate(&caps(&["proc.spawn"]), None).unwrap();
    let all = [&root, &child, &grandchild, &sibling].map(|t| t.to_string());
    for s in &all {
        verifier.verify(s, NOW).unwrap(); // warm the cache: revocation must beat it
    }
    assert!(verifier.revoke(child.token_id()));
    assert!(!verifier.revoke(child.token_id()), "already revoked");
    assert!(verifier.verify(&all[0], NOW).is_ok(), "the parent survives");
    for s in [&all[1], &all[2]] {
        assert_eq!(verifier.verify(s, NOW), Err(TokenError::Revoked { token_id: child.token_id().to_string() }));
    }
    assert!(verifier.verify(&all[3], NOW).is_ok(), "the sibling survives");
    verifier.extend_revoked([root.root_id().to_string()]);
    for s in &all {
        assert!(matches!(verifier.verify(s, NOW), Err(TokenError::Revoked { .. })));
    }
    assert!(verifier.is_revoked(root.token_id()));
    assert_eq!(verifier.revoked_ids().len(), 2);
    // Revocation is by id, so a fresh verifier that loads the persisted set agrees.
    let restarted = Verifier::new(KEY);
    restarted.extend_revoked(verifier.revoked_ids());
    assert!(matches!(restarted.verify(&all[3], NOW), Err(TokenError::Revoked { .. })));
}

#[test]
fn durable_revocations_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(REVOCATIONS_FILE_NAME);
    let verifier = Verifier::new(KEY);
    assert_eq!(verifier.load_revocations(&path).unwrap(), 0, "no file yet");
    let root = mint();
    let child = root.attenuate(&caps(&["proc.spawn"]), None).unwrap();
    assert!(verifier.revoke_durably(&path, child.token_id()).unwrap());
    assert!(!verifier.revoke_durably(&path, child.token_id()).unwrap());
    assert!(matches!(verifier.revoke_durably(&path, "not-an-id\nX"), Err(RevocationError::InvalidId { .. })));
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    let restarted = Verifier::new(KEY);
    assert_eq!(restarted.load_revocations(&path).unwrap(), 1);
    assert!(matches!(restarted.verify(&child.to_string(), NOW), Err(TokenError::Revoked { .. })));
    assert!(restarted.verify(&root.to_string(), NOW).is_ok());
    std::fs::write(&path, "zzz\n").unwrap();
    assert!(matches!(restarted.load_revocations(&path), Err(RevocationError::InvalidId { .. })));
}

#[test]
fn a_token_from_another_session_is_refused() {
    let verifier = Verifier::new(KEY);
    let s = mint().attenuate(&caps(&["proc.spawn"]), None).unwrap().to_string();
    assert!(verifier.verify_for_session(&s, "s_one", NOW).is_ok());
    assert_eq!(
        verifier.verify_for_session(&s, "s_two", NOW),
        Err(TokenError::WrongSession { token_session: "s_one".into(), expected: "s_two".into() })
    );
}

#[test]
fn every_rejection_maps_to_unauthorized_with_a_reason() {
    for e in [
        TokenError::Forged,
        TokenError::Malformed("x".into()),
        TokenError::Expired { expires_ms: 1 },
        TokenError::Revoked { token_id: "abc".into() },
        TokenError::WrongSession { token_session: "a".into(), expected: "b".into() },
        TokenError::Widened { depth: 1, detail: "d".into() },
    ] {
        let rpc = e.to_rpc_error();
        assert_eq!(rpc.code, -32001);
        let reason = rpc.data.as_ref().unwrap()["reason"].as_str().unwrap();
        assert!(reason.len() > 20, "{reason}");
    }
}

#[test]
fn the_cache_is_bounded_and_shared_across_threads() {
    let verifier = Arc::new(Verifier::with_cache_capacity(KEY, 4));
    let tokens: Vec<String> = (0..20).map(|_| mint().to_string()).collect();
    for t in &tokens {
        verifier.verify(t, NOW).unwrap();
        assert!(verifier.cached() <= 8, "{}", verifier.cached());
    }
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let v = verifier.clone();
            let ts = tokens.clone();
            std::thread::spawn(move || {
                for t in ts.iter().cycle().skip(i).take(200) {
                    v.verify(t, NOW).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(verifier.cached() <= 8);
    let uncached = Verifier::with_cache_capacity(KEY, 0);
    uncached.verify(&tokens[0], NOW).unwrap();
    assert_eq!(uncached.cached(), 0);
}

#[test]
fn inspect_reads_without_a_key_and_says_unverified() {
    let t = mint().attenuate(&caps(&["tool(github__a)"]), Some(EXP - 1)).unwrap();
    let i = inspect(&t.to_string()).unwrap();
    assert!(!i.verified);
    assert_eq!(i.session_id, "s_one");
    assert_eq!(i.capabilities, vec!["tool(github__a)"]);
    assert_eq!(i.depth, 1);
    assert_eq!(i.blocks.len(), 2);
    assert_eq!(i.blocks[0].capabilities.len(), 5);
    assert!(i.narrowing_ok);
    let text = i.to_string();
    assert!(text.starts_with("UNVERIFIED"), "{text}");
    assert!(text.contains("tool(github__a)"));
    let json = serde_json::to_value(&i).unwrap();
    assert_eq!(json["verified"], false);
    // A foreign token inspects just as well: inspection is not verification.
    let foreign = Minter::new([9; 32]).mint("s_x", &caps(&["pty.open"]), 5);
    assert!(!inspect(&foreign.to_string()).unwrap().verified);
    let widened =
        append_raw_block(&t.to_string(), r#"{"id":"00000000000000000000000000000001","exp":1,"caps":["fs.write(/)"]}"#);
    let i = inspect(&widened).unwrap();
    assert!(!i.narrowing_ok);
    assert!(i.to_string().contains("WARNING"));
    assert!(inspect("nonsense").is_err());
}

#[test]
fn the_root_key_file_is_private_stable_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let k1 = load_or_create_root_key(&state).unwrap();
    let path = state.join(KEY_FILE_NAME);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(load_or_create_root_key(&state).unwrap(), k1);
    assert_eq!(load_root_key(&state).unwrap(), k1);
    assert!(matches!(load_root_key(&dir.path().join("elsewhere")), Err(KeyError::Io { .. })));
    assert!(!dir.path().join("elsewhere").exists(), "load never creates");
    assert_ne!(k1, [0; 32]);
    // Minted with the loaded key, verified with it after a "restart".
    let t = Minter::new(k1).mint("s", &caps(&["proc.spawn"]), EXP);
    let k2 = load_or_create_root_key(&state).unwrap();
    Verifier::new(k2).verify(&t.to_string(), NOW).unwrap();

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(load_or_create_root_key(&state), Err(KeyError::Permissions { mode: 0o644, .. })));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not hex").unwrap();
    assert!(matches!(load_or_create_root_key(&state), Err(KeyError::Corrupt { .. })));

    // Racing creators agree on one key.
    let race = dir.path().join("race");
    let keys: Vec<[u8; 32]> = (0..8)
        .map(|_| {
            let r = race.clone();
            std::thread::spawn(move || load_or_create_root_key(&r).unwrap())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert!(keys.iter().all(|k| *k == keys[0]));
    let leftovers: Vec<_> = std::fs::read_dir(&race).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left behind");
}

// ---- property tests ---------------------------------------------------------------------

/// A small universe so random sets often overlap, nest and collide.
fn grant() -> impl Strategy<Value = Capability> {
    let paths = prop::sample::select(vec!["/", "/w", "/w/a", "/w/a/b", "/w/b", "/x"]);
    let hosts = prop::sample::select(vec![
        "example.com",
        "*.example.com",
        "a.example.com",
        "*.a.example.com",
        "x.a.example.com",
        "other.org",
    ]);
    let ports = prop::sample::select(vec![None, Some(443u16), Some(80)]);
    let globs = prop::sample::select(vec![
        "*",
        "gh__*",
        "gh__create_*",
        "gh__create_issue",
        "gh__?reate_issue",
        "*_issue",
        "time__*",
        "time__now",
    ]);
    prop_oneof![
        paths.clone().prop_map(|p| Capability::FsRead(p.into())),
        paths.prop_map(|p| Capability::FsWrite(p.into())),
        (hosts, ports).prop_map(|(h, port)| Capability::NetConnect { host: h.into(), port }),
        globs.prop_map(|g| Capability::Tool(g.into())),
        Just(Capability::ProcSpawn),
        Just(Capability::PtyOpen),
    ]
}

fn grant_set() -> impl Strategy<Value = CapabilitySet> {
    prop::collection::vec(grant(), 0..5).prop_map(CapabilitySet)
}

/// Concrete requests, to check semantics rather than the covering relation against itself.
fn requests() -> Vec<Capability> {
    let mut out = Vec::new();
    for p in ["/", "/w", "/w/a", "/w/a/b/c", "/w/b", "/w/bb", "/x/y", "/y"] {
        out.push(Capability::FsRead(p.into()));
        out.push(Capability::FsWrite(p.into()));
    }
    for h in ["example.com", "a.example.com", "x.a.example.com", "b.example.com", "other.org", "example.org"] {
        for port in [443, 80, 8080] {
            out.push(Capability::NetConnect { host: h.into(), port: Some(port) });
        }
    }
    for t in ["gh__create_issue", "gh__create_pr", "gh__list", "time__now", "time__zone", "xcreate_issue", "jira_issue"]
    {
        out.push(Capability::Tool(t.into()));
    }
    out.push(Capability::ProcSpawn);
    out.push(Capability::PtyOpen);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Honest holders: `attenuate` either refuses (naming a grant the parent really lacks) or
    /// produces a token that verifies and allows no concrete request the root did not.
    #[test]
    fn no_sequence_of_attenuations_widens(
        root in grant_set(),
        steps in prop::collection::vec((grant_set(), 0u64..3000), 1..6),
    ) {
        let verifier = Verifier::new(KEY);
        let mut token = Minter::new(KEY).mint("s", &root, EXP);
        for (child_caps, exp) in steps {
            match token.attenuate(&child_caps, Some(exp + NOW)) {
                Ok(child) => {
                    for g in child.caps().iter() {
                        prop_assert!(root.allows(g), "{g} escaped root {:?}", root.to_strings());
                        prop_assert!(token.caps().allows(g));
                    }
                    prop_assert!(child.expires_ms() <= token.expires_ms());
                    token = child;
                }
                Err(AttenuateError::Widening { grant }) => {
                    prop_assert!(!token.caps().allows(&grant));
                    prop_assert!(child_caps.0.contains(&grant));
                }
                Err(AttenuateError::ExpiryExtended { .. }) => {
                    prop_assert!(exp + NOW > token.expires_ms());
                }
                Err(AttenuateError::TooDeep) => prop_assert!(false, "depth < 6"),
            }
        }
        let v = verifier.verify(&token.to_string(), 0).unwrap();
        for r in requests() {
            if v.caps.allows(&r) {
                prop_assert!(root.allows(&r), "token allows {r} but the root does not");
            }
        }
    }

    /// Malicious holders: arbitrary blocks with valid MACs appended by hand. Whatever the
    /// verifier accepts allows no concrete request the root did not, and expires no later.
    #[test]
    fn the_verifier_never_accepts_a_wider_chain(
        root in grant_set(),
        steps in prop::collection::vec((grant_set(), 0u64..3_000_000), 1..5),
    ) {
        let verifier = Verifier::new(KEY);
        let mut s = Minter::new(KEY).mint("s", &root, EXP).to_string();
        for (i, (child_caps, exp)) in steps.iter().enumerate() {
            let block = serde_json::json!({
                "id": format!("{i:032x}"),
                "exp": exp,
                "caps": child_caps,
            });
            s = append_raw_block(&s, &block.to_string());
        }
        match verifier.verify(&s, 0) {
            Ok(v) => {
                prop_assert!(v.expires_ms <= EXP);
                for r in requests() {
                    if v.caps.allows(&r) {
                        prop_assert!(root.allows(&r), "accepted a chain allowing {r}");
                    }
                }
                for g in v.caps.iter() {
                    prop_assert!(root.allows(g));
                }
            }
            Err(TokenError::Widened { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}
