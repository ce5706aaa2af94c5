//! Install, list, inspect, remove, load; and every refusal with its reason: tampered artifact,
//! wrong digest, bad signature, ABI mismatch, over-reaching manifest.

use std::sync::Arc;

use axp_plugin_host::{InstallError, InstallOptions, ManifestError};
use axp_protocol::ToolCall;
use axp_provider_api::{CancellationToken, NullSink};
use serde_json::json;

use super::common::*;

#[tokio::test]
async fn install_list_call_remove() {
    let state = tempfile::tempdir().unwrap();
    let ctx = ctx();
    let (entry, tools) =
        axp_plugin_host::install(&dist("hello"), &InstallOptions::default(), state.path(), &ctx, &quiet).await.unwrap();
    assert_eq!(entry.id, "hello");
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "noop", "greet", "fetch"]);
    assert!(state.path().join("plugins/hello/0.1.0/hello.wasm").is_file());

    let listed = axp_plugin_host::list(state.path()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].tools, ["echo", "noop", "greet", "fetch"]);
    let (_, manifest) = axp_plugin_host::inspect(state.path(), "hello").unwrap();
    assert_eq!(manifest.capabilities.net, ["api.example.test"]);

    let loaded = axp_plugin_host::load_installed_with(state.path(), &ctx).await;
    assert_eq!(loaded.len(), 1);
    let provider = loaded.into_iter().next().unwrap().1.unwrap();
    let out = provider
        .call(
            ToolCall { tool: "echo".into(), arguments: args(json!({"message": "hi"})), meta: None },
            Arc::new(NullSink),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.structured_content, Some(json!({"message": "hi"})));

    axp_plugin_host::remove(state.path(), "hello").unwrap();
    assert!(axp_plugin_host::list(state.path()).unwrap().is_empty());
    assert!(!state.path().join("plugins/hello").exists());
    let err = axp_plugin_host::remove(state.path(), "hello").unwrap_err();
    assert!(matches!(err, InstallError::NotInstalled(_)), "{err}");
}

#[tokio::test]
async fn a_bare_wasm_file_installs_with_no_capabilities() {
    let state = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let bare = tmp.path().join("hello.wasm");
    std::fs::copy(dist("hello").join("hello.wasm"), &bare).unwrap();
    let (entry, _) =
        axp_plugin_host::install(&bare, &InstallOptions::default(), state.path(), &ctx(), &quiet).await.unwrap();
    assert_eq!(entry.id, "hello");
    assert!(entry.capabilities.net.is_empty());
}

#[tokio::test]
async fn tampered_artifact_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_dist("hello", tmp.path());
    let wasm = dir.join("hello.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0xff;
    std::fs::write(&wasm, bytes).unwrap();
    let state = tempfile::tempdir().unwrap();
    let err =
        axp_plugin_host::install(&dir, &InstallOptions::default(), state.path(), &ctx(), &quiet).await.unwrap_err();
    assert!(matches!(err, InstallError::Tampered { .. }), "{err}");
    assert!(err.to_string().contains("tampered"), "{err}");
    assert!(axp_plugin_host::list(state.path()).unwrap().is_empty());
}

#[tokio::test]
async fn tampering_after_install_is_refused_at_load() {
    let state = tempfile::tempdir().unwrap();
    let ctx = ctx();
    axp_plugin_host::install(&dist("hello"), &InstallOptions::default(), state.path(), &ctx, &quiet).await.unwrap();
    let wasm = state.path().join("plugins/hello/0.1.0/hello.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    bytes.push(0);
    std::fs::write(&wasm, bytes).unwrap();
    let loaded = axp_plugin_host::load_installed_with(state.path(), &ctx).await;
    let err = loaded.into_iter().next().unwrap().1.err().unwrap();
    assert!(matches!(err, InstallError::Tampered { .. }), "{err}");
}

#[tokio::test]
async fn wrong_digest_is_refused() {
    let state = tempfile::tempdir().unwrap();
    let opts = InstallOptions { expected_sha256: Some("ab".repeat(32)), pubkey: None };
    let err = axp_plugin_host::install(&dist("hello"), &opts, state.path(), &ctx(), &quiet).await.unwrap_err();
    assert!(matches!(err, InstallError::WrongDigest { .. }), "{err}");
    assert!(err.to_string().contains(&"ab".repeat(32)), "{err}");
    // The right digest passes.
    let right = axp_plugin_host::sha256_hex(&std::fs::read(dist("hello").join("hello.wasm")).unwrap());
    let opts = InstallOptions { expected_sha256: Some(right.to_uppercase()), pubkey: None };
    axp_plugin_host::install(&dist("hello"), &opts, state.path(), &ctx(), &quiet).await.unwrap();
}

fn sign(dir: &std::path::Path, kp: &minisign::KeyPair) {
    let bytes = std::fs::read(dir.join("hello.wasm")).unwrap();
    let sig = minisign::sign(Some(&kp.pk), &kp.sk, std::io::Cursor::new(bytes), None, None).unwrap();
    std::fs::write(dir.join("hello.wasm.minisig"), sig.to_string()).unwrap();
}

#[tokio::test]
async fn signatures_are_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_dist("hello", tmp.path());
    let signer = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    let stranger = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    sign(&dir, &signer);
    let state = tempfile::tempdir().unwrap();

    let opts = InstallOptions { expected_sha256: None, pubkey: Some(stranger.pk.to_base64()) };
    let err = axp_plugin_host::install(&dir, &opts, state.path(), &ctx(), &quiet).await.unwrap_err();
    assert!(matches!(err, InstallError::Signature(_)), "{err}");
    assert!(err.to_string().contains("does not verify"), "{err}");

    let opts = InstallOptions { expected_sha256: None, pubkey: Some(signer.pk.to_base64()) };
    let (entry, _) = axp_plugin_host::install(&dir, &opts, state.path(), &ctx(), &quiet).await.unwrap();
    assert!(entry.signed_by.is_some());

    // A key given but no signature present.
    std::fs::remove_file(dir.join("hello.wasm.minisig")).unwrap();
    let err = axp_plugin_host::install(&dir, &opts, state.path(), &ctx(), &quiet).await.unwrap_err();
    assert!(err.to_string().contains("carries no signature"), "{err}");
}

#[tokio::test]
async fn abi_mismatch_is_refused_naming_both_versions() {
    let state = tempfile::tempdir().unwrap();
    let err = axp_plugin_host::install(&dist("abi-mismatch"), &InstallOptions::default(), state.path(), &ctx(), &quiet)
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Manifest(ManifestError::AbiMismatch { .. })), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("ABI 0.2.0") && msg.contains("ABI 0.1.0"), "{msg}");
}

#[tokio::test]
async fn over_reaching_manifest_is_refused() {
    let state = tempfile::tempdir().unwrap();
    let err = axp_plugin_host::install(&dist("overreach"), &InstallOptions::default(), state.path(), &ctx(), &quiet)
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Manifest(ManifestError::OverReach { .. })), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("net `*`") && msg.contains("fs `/etc`"), "{msg}");
    assert!(!state.path().join("plugins").exists());
}

#[test]
fn fs_grants_resolve_inside_the_workspace_and_links_out_are_refused() {
    use axp_plugin_host::{Manifest, fs_grants};
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("data/sub")).unwrap();
    std::os::unix::fs::symlink("/etc", ws.path().join("escape")).unwrap();
    let mut m = Manifest::load(&dist("hello").join("axp-plugin.toml")).unwrap();
    m.capabilities.fs = vec!["data/sub/".into()];
    let got = fs_grants(&m, Some(ws.path())).unwrap();
    assert_eq!(got, vec![(ws.path().canonicalize().unwrap().join("data/sub"), "data/sub".to_string())]);
    m.capabilities.fs = vec!["escape".into()];
    let err = fs_grants(&m, Some(ws.path())).unwrap_err().to_string();
    assert!(err.contains("escape") && err.contains("not a directory inside the workspace"), "{err}");
    m.capabilities.fs = vec!["missing".into()];
    assert!(fs_grants(&m, Some(ws.path())).unwrap_err().to_string().contains("missing"));
    m.capabilities.fs = vec!["data".into()];
    assert!(fs_grants(&m, None).unwrap_err().to_string().contains("need a workspace"));
}

/// Every read-modify-write of the lockfile holds one exclusive lock, so two writers in two
/// processes (two `axp provider add`, or an add and a replica writing its copy of the shared
/// lockfile) never drop each other's entry: a writer waits while another holds it, then reads
/// what the other wrote. Here two installs run at once, each from its own thread and runtime,
/// and a removal waits for a hold taken by "another process" (a second open of the file).
#[test]
fn lockfile_writers_wait_for_each_other_and_lose_no_entry() {
    let state = tempfile::tempdir().unwrap();
    let install = |name: &'static str| {
        let path = state.path().to_path_buf();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(axp_plugin_host::install(&dist(name), &InstallOptions::default(), &path, &ctx(), &quiet))
                .map(|(entry, _)| entry.id)
        })
    };
    let (a, b) = (install("hello"), install("hostile"));
    assert_eq!(a.join().unwrap().unwrap(), "hello");
    assert_eq!(b.join().unwrap().unwrap(), "hostile");
    let ids: Vec<String> = axp_plugin_host::list(state.path()).unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["hello", "hostile"], "both installs are in the lockfile");

    let hold = axp_plugin_host::hold_lock(state.path()).unwrap();
    let path = state.path().to_path_buf();
    let removal = std::thread::spawn(move || axp_plugin_host::remove(&path, "hello").map(|e| e.id));
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!removal.is_finished(), "the removal waits while another writer holds the lockfile");
    assert_eq!(axp_plugin_host::list(state.path()).unwrap().len(), 2);
    drop(hold);
    assert_eq!(removal.join().unwrap().unwrap(), "hello");
    let ids: Vec<String> = axp_plugin_host::list(state.path()).unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["hostile"]);
}
