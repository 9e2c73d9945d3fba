//! A local AWS KMS for the KMS signer's tests: moto's server (installed by `scripts/install-tools` into .tools/venv) with `Sign` as AWS documents it (tools/local-kms/server.py), as a child process on a free port, with signing keys made as an operator would make them; killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use aws_sdk_kms::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_kms::types::{KeySpec, KeyUsageType};

use crate::anvil::wait_for_listener;

/// The Python that `scripts/install-tools` installs moto into, relative to the workspace root.
pub const LOCAL_KMS_PYTHON_RELATIVE: &str = ".tools/venv/bin/python";
/// moto's server with AWS's `Sign` (base64 blobs, `MessageType=DIGEST`, disabled keys refused).
pub const LOCAL_KMS_SERVER_RELATIVE: &str = "tools/local-kms/server.py";
/// moto's server starts in one to three seconds; the margin covers a loaded CI machine.
pub const LOCAL_KMS_START_TIMEOUT_MS: u64 = 30_000;
const LOCAL_KMS_PORT_POLL_INTERVAL_MS: u64 = 20;
/// The region the local KMS is addressed in (moto serves any).
pub const LOCAL_KMS_REGION: &str = "us-east-1";

/// A running local KMS.
pub struct LocalKms {
    child: Child,
    url: String,
}

fn workspace_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

impl LocalKms {
    /// Starts moto's server on 127.0.0.1. Panics (tests must fail, not skip) when it is missing
    /// or does not come up.
    pub fn start() -> LocalKms {
        let bin = workspace_path(LOCAL_KMS_PYTHON_RELATIVE);
        assert!(
            bin.is_file(),
            "the tools' Python not found at {}: run scripts/install-tools from the workspace root",
            bin.display()
        );
        let mut child = Command::new(&bin)
            .arg(workspace_path(LOCAL_KMS_SERVER_RELATIVE))
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let port = wait_for_listener(
            &mut child,
            "the local KMS",
            LOCAL_KMS_START_TIMEOUT_MS,
            LOCAL_KMS_PORT_POLL_INTERVAL_MS,
        );
        LocalKms { child, url: format!("http://127.0.0.1:{port}") }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A KMS client for this server, with fixed test credentials (moto checks none).
    pub fn client(&self) -> aws_sdk_kms::Client {
        let config = aws_sdk_kms::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(LOCAL_KMS_REGION))
            .credentials_provider(Credentials::new(
                "testing",
                "testing",
                None,
                None,
                "payoutd-testkit",
            ))
            .endpoint_url(&self.url)
            .build();
        aws_sdk_kms::Client::from_conf(config)
    }

    /// A new key as an operator makes one for a hot wallet: `ECC_SECG_P256K1`, `SIGN_VERIFY`. Its id.
    pub async fn create_signing_key(&self) -> String {
        let made = self
            .client()
            .create_key()
            .key_spec(KeySpec::EccSecgP256K1)
            .key_usage(KeyUsageType::SignVerify)
            .send()
            .await
            .expect("create a KMS key");
        made.key_metadata().expect("key metadata").key_id().to_owned()
    }

    /// Disables `key_id`: KMS refuses to sign with it until it is enabled again.
    pub async fn disable_key(&self, key_id: &str) {
        self.client().disable_key().key_id(key_id).send().await.expect("disable the KMS key");
    }

    pub async fn enable_key(&self, key_id: &str) {
        self.client().enable_key().key_id(key_id).send().await.expect("enable the KMS key");
    }
}

impl Drop for LocalKms {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
