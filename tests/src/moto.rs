//! A moto server for the tests that talk to AWS APIs (DynamoDB, CloudFormation, ...).
//!
//! [`MotoServer::start`] runs `moto_server` as a child process on a free loopback port; the
//! tests of one binary share one server through [`shared`] and run on one runtime, [`runtime`].
//! The server never outlives the test process: it is started behind a small shell watchdog that
//! reads the test process's pipe and stops moto when the pipe closes, which happens on
//! [`Drop`] and also when the process exits without running destructors (statics). moto serves
//! one request at a time (see [`SITECUSTOMIZE`] for why).
//!
//! [`deploy_stack`] deploys a CloudFormation template to moto; [`create_pool_table`] creates the
//! pool table from `infra/pool-table.yaml` itself, so the tests and the template cannot drift.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_cloudformation::types::{Parameter, StackStatus};
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::TimeToLiveSpecification;

/// How long [`MotoServer::start`] waits for the server to answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`deploy_stack`] waits for `CREATE_COMPLETE`.
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts moto (`$0`) on port `$1` and, when fd 0 (the test process's pipe) closes, stops it and
/// removes `$2` (its temporary directory, which the process's static server never drops). The
/// shell ends when moto does, so an early exit (port taken, bad install) shows as the child's
/// exit. The watcher reads a dup of stdin on fd 3 (an asynchronous list's own stdin is
/// /dev/null) and kills moto with SIGKILL: moto's SIGTERM handler is lost when the signal lands
/// during a request, and the server has nothing to save.
const WATCHDOG: &str = r#"exec 3<&0
"$0" -H 127.0.0.1 -p "$1" 3<&- </dev/null &
pid=$!
{ read -r _ <&3; kill -KILL "$pid" 2>/dev/null; rm -rf "$2"; } &
wait "$pid""#;

/// Put first on moto's `PYTHONPATH`:
///
/// - makes `moto_server` serve one request at a time. moto's request handling is not atomic (an
///   `UpdateItem` `ADD` is a read-modify-write of a Python object; a cancelled
///   `TransactWriteItems` is rolled back by restoring a copy of the whole table taken before it
///   ran), so concurrent requests on one table can lose each other's writes, which DynamoDB
///   never does. Serving requests one by one makes moto as atomic as DynamoDB; the stores' own
///   concurrency (many requests in flight, retries) is unchanged.
/// - gives moto's CloudFormation the `AWS::SecretsManager::Secret` it lacks (moto 5.2.5), as
///   CloudFormation creates one: its `Name` (else a generated one), its `SecretString`, or its
///   `GenerateSecretString` (the template's JSON with one generated key of `PasswordLength`
///   letters and digits: the stacks' secrets exclude punctuation, and ask nothing else), its
///   `Ref` the secret's ARN; kept as it is by a stack update (the stacks' secrets keep their
///   name), deleted with its stack. The secret's resource policy
///   (`AWS::SecretsManager::ResourcePolicy`) stays unmodelled: moto applies no resource policy
///   (tests/tests/infra/pool_table.rs checks the template's).
const SITECUSTOMIZE: &str = r#"# forewarn test harness (see tests/src/moto.rs).
import json as _json
import secrets as _secrets
import string as _string

import werkzeug.serving as _serving

_run_simple = _serving.run_simple


def _run_simple_serially(*args, **kwargs):
    kwargs["threaded"] = False
    return _run_simple(*args, **kwargs)


_serving.run_simple = _run_simple_serially

from moto.core.common_models import CloudFormationModel as _Model  # noqa: E402


class _Secret(_Model):
    # moto files its models by service, from the module's name.
    __module__ = "moto.secretsmanager.forewarn_harness"

    def __init__(self, arn):
        self.physical_resource_id = arn

    @staticmethod
    def cloudformation_name_type():
        return "Name"

    @staticmethod
    def cloudformation_type():
        return "AWS::SecretsManager::Secret"

    @staticmethod
    def _backend(account_id, region_name):
        from moto.secretsmanager.models import secretsmanager_backends

        return secretsmanager_backends[account_id][region_name]

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        props = cloudformation_json.get("Properties", {})
        value = props.get("SecretString")
        generate = props.get("GenerateSecretString")
        if generate is not None:
            fields = _json.loads(generate.get("SecretStringTemplate", "{}"))
            alphabet = _string.ascii_letters + _string.digits
            length = int(generate.get("PasswordLength", 32))
            generated = "".join(_secrets.choice(alphabet) for _ in range(length))
            fields[generate.get("GenerateStringKey", "password")] = generated
            value = _json.dumps(fields)
        name = props.get("Name", resource_name)
        backend = cls._backend(account_id, region_name)
        backend.create_secret(
            name=name,
            secret_string=value,
            secret_binary=None,
            description=props.get("Description"),
            tags=None,
            kms_key_id=None,
            client_request_token=None,
            replica_regions=[],
            force_overwrite=False,
        )
        return cls(backend.secrets[name].arn)

    @classmethod
    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        # The stacks' secrets keep their name: an update leaves the secret and its versions.
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name
    ):
        backend = cls._backend(account_id, region_name)
        if resource_name in backend.secrets:
            backend.delete_secret(resource_name, None, True)

    def is_created(self):
        return True
"#;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The bootstrap `cargo lambda build` made of `binary` (under `target/lambda`); fails the test,
/// saying how to build it, when it is missing.
pub fn lambda_bootstrap(binary: &str) -> PathBuf {
    let path = workspace_root()
        .join("target/lambda")
        .join(binary)
        .join("bootstrap");
    assert!(
        path.is_file(),
        "{} is missing: build the functions first with `cargo lambda build --x86-64 \
         -p interruption-handler -p pool-sweeper` (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Where `moto_server` is: `$FOREWARN_MOTO_SERVER`, else `<workspace>/.venv/bin/moto_server`,
/// else the first `moto_server` on `PATH`.
pub fn find_moto_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FOREWARN_MOTO_SERVER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let venv = workspace_root().join(".venv/bin/moto_server");
    if venv.is_file() {
        return Some(venv);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.is_file())
}

/// A running moto server, stopped on drop.
pub struct MotoServer {
    child: Child,
    /// Closing it stops the server (see [`WATCHDOG`]).
    pipe: Option<ChildStdin>,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for MotoServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MotoServer")
            .field("endpoint", &self.endpoint())
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl MotoServer {
    /// Starts a server and waits until it answers. Panics, saying how to install moto, when
    /// `moto_server` cannot be found: tests that need it fail rather than skip.
    pub fn start() -> MotoServer {
        match MotoServer::try_start() {
            Ok(server) => server,
            Err(e) => panic!("{e:#}"),
        }
    }

    pub fn try_start() -> anyhow::Result<MotoServer> {
        let program = find_moto_server().ok_or_else(|| {
            anyhow!(
                "moto_server not found (looked at $FOREWARN_MOTO_SERVER, {}, and PATH): run \
                 `scripts/test.sh`, or `scripts/venv.sh && export PATH=\"$PWD/.venv/bin:$PATH\"`",
                workspace_root().join(".venv/bin/moto_server").display()
            )
        })?;
        let mut last_error = None;
        // A free port can be taken between choosing it and moto binding it: try a few.
        for _ in 0..3 {
            match MotoServer::start_on(&program, free_port()?) {
                Ok(server) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("moto_server did not start")))
    }

    fn start_on(program: &Path, port: u16) -> anyhow::Result<MotoServer> {
        let dir = tempfile::Builder::new()
            .prefix("forewarn-moto-")
            .tempdir()
            .context("creating a directory for the moto log")?;
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log)
            .with_context(|| format!("creating the moto log {}", log.display()))?;
        let err = out.try_clone().context("opening the moto log")?;
        let site = dir.path().join("site");
        std::fs::create_dir_all(&site)
            .and_then(|()| std::fs::write(site.join("sitecustomize.py"), SITECUSTOMIZE))
            .with_context(|| format!("writing {}", site.display()))?;
        let python_path = match std::env::var_os("PYTHONPATH") {
            Some(old) if !old.is_empty() => std::env::join_paths(
                std::iter::once(site.clone()).chain(std::env::split_paths(&old)),
            )
            .context("building PYTHONPATH")?,
            _ => site.clone().into_os_string(),
        };
        let mut child = Command::new("sh")
            .env("PYTHONPATH", python_path)
            .arg("-c")
            .arg(WATCHDOG)
            .arg(program)
            .arg(port.to_string())
            .arg(dir.path())
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {} (through sh)", program.display()))?;
        let pipe = child.stdin.take();
        let mut server = MotoServer {
            child,
            pipe,
            port,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait().context("watching moto_server")? {
                bail!(
                    "{} exited ({status}) before answering on port {port}; its log:\n{}",
                    program.display(),
                    server.log_text()
                );
            }
            if answers(port) {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not answer on port {port} within {START_TIMEOUT:?}; its log:\n{}",
                    program.display(),
                    server.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's output.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(unreadable: {e})"))
    }

    /// An SDK configuration for the server: region `us-east-1`, static test credentials, the
    /// server as endpoint of every service.
    pub fn sdk_config(&self) -> SdkConfig {
        // A time source and an identity cache, as `aws_config` loads them: a member role's
        // provider needs a clock, and member configurations share the cache.
        let mut config = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "testing", "testing", None, None, "moto",
            )))
            .identity_cache(aws_config::identity::IdentityCache::lazy().build())
            .endpoint_url(self.endpoint());
        config.set_time_source(Some(Default::default()));
        config.build()
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        // Closing the pipe makes the watchdog stop moto; the shell then exits.
        drop(self.pipe.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) | Err(_) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("choosing a free port")?;
    Ok(listener
        .local_addr()
        .context("choosing a free port")?
        .port())
}

/// Whether an HTTP server answers on the port.
fn answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

/// The moto server of this test binary, started on first use.
pub fn shared() -> &'static MotoServer {
    static SERVER: OnceLock<MotoServer> = OnceLock::new();
    SERVER.get_or_init(MotoServer::start)
}

/// The runtime of this test binary's tests that use [`shared`]: SDK clients keep connections
/// tied to the runtime that opened them, so tests sharing a server share one runtime (call
/// `runtime().block_on(...)` from a plain `#[test]`).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("building the test runtime: {e}"))
    })
}

/// A name no other test of this process uses: `prefix-<pid>-<n>` (valid for stacks and tables).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Deploys `template_body` as stack `name` with `params`, waits for `CREATE_COMPLETE` and
/// answers the stack's outputs (key → value).
pub async fn deploy_stack(
    config: &SdkConfig,
    name: &str,
    template_body: &str,
    params: &[(&str, &str)],
) -> anyhow::Result<HashMap<String, String>> {
    let cfn = aws_sdk_cloudformation::Client::new(config);
    let parameters = params
        .iter()
        .map(|(k, v)| {
            Parameter::builder()
                .parameter_key(*k)
                .parameter_value(*v)
                .build()
        })
        .collect();
    cfn.create_stack()
        .stack_name(name)
        .template_body(template_body)
        .set_parameters(Some(parameters))
        .send()
        .await
        .map_err(|e| anyhow!("creating stack {name}: {}", DisplayErrorContext(e)))?;
    let deadline = Instant::now() + DEPLOY_TIMEOUT;
    loop {
        let out = cfn
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| anyhow!("describing stack {name}: {}", DisplayErrorContext(e)))?;
        let stack = out
            .stacks()
            .first()
            .ok_or_else(|| anyhow!("stack {name} is not described"))?;
        match stack.stack_status() {
            Some(StackStatus::CreateComplete) => {
                return Ok(stack
                    .outputs()
                    .iter()
                    .filter_map(|o| {
                        Some((o.output_key()?.to_string(), o.output_value()?.to_string()))
                    })
                    .collect());
            }
            Some(StackStatus::CreateInProgress) | None => {}
            Some(status) => bail!(
                "stack {name} is {status}: {}",
                stack.stack_status_reason().unwrap_or("no reason given")
            ),
        }
        if Instant::now() > deadline {
            bail!("stack {name} was not created within {DEPLOY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pool table's template, `infra/pool-table.yaml`.
pub fn pool_table_template() -> anyhow::Result<String> {
    let path = workspace_root().join("infra/pool-table.yaml");
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// Creates a pool table named `table` from `infra/pool-table.yaml` (through CloudFormation, as
/// stack `table`, with its continuation keys' secret, [`key_secret_of`]) and answers the table's
/// name.
///
/// moto's CloudFormation creates the table without its `TimeToLiveSpecification`, so the TTL is
/// then turned on with `UpdateTimeToLive`, as the template asks. (moto never deletes expired
/// items anyway; the stores filter them out, which the tests check.)
pub async fn create_pool_table(config: &SdkConfig, table: &str) -> anyhow::Result<String> {
    let template = pool_table_template()?;
    let outputs = deploy_stack(config, table, &template, &[("TableName", table)]).await?;
    let name = outputs
        .get("TableName")
        .ok_or_else(|| anyhow!("stack {table} has no TableName output: {outputs:?}"))?
        .clone();
    if name != table {
        bail!("stack {table} created table {name} instead");
    }
    aws_sdk_dynamodb::Client::new(config)
        .update_time_to_live()
        .table_name(&name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("expires_at")
                .enabled(true)
                .build()
                .context("building the TTL specification")?,
        )
        .send()
        .await
        .map_err(|e| anyhow!("enabling the TTL of {name}: {}", DisplayErrorContext(e)))?;
    Ok(name)
}

/// The continuation keys' secret of a pool table `table` made from `infra/pool-table.yaml`
/// (`<TableName>-continuation-key`).
pub fn key_secret_of(table: &str) -> String {
    format!("{table}-continuation-key")
}

/// The DynamoDB store of pool table `table`, its continuation keys in secret `secret`, as the
/// functions are wired.
pub fn keyed_store(
    config: &SdkConfig,
    table: &str,
    secret: &str,
) -> forewarn::adapters::dynamo::DynamoStore {
    let keys = aws_sdk_secretsmanager::Client::new(config);
    let keys = forewarn::adapters::dynamo::SecretKeys::new(keys, secret);
    forewarn::adapters::dynamo::DynamoStore::new(aws_sdk_dynamodb::Client::new(config), table)
        .with_key_secret(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_and_stops() {
        let server = MotoServer::start();
        let port = server.port;
        assert!(answers(port));
        drop(server);
        let deadline = Instant::now() + Duration::from_secs(10);
        while answers(port) {
            assert!(Instant::now() < deadline, "moto still answers after drop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn the_pool_table_deploys_with_its_indexes_and_ttl() {
        runtime().block_on(async {
            let config = shared().sdk_config();
            let name = create_pool_table(&config, &unique_name("harness"))
                .await
                .unwrap();
            let ddb = aws_sdk_dynamodb::Client::new(&config);
            let table = ddb.describe_table().table_name(&name).send().await.unwrap();
            let table = table.table().unwrap();
            let mut indexes: Vec<&str> = table
                .global_secondary_indexes()
                .iter()
                .filter_map(|i| i.index_name())
                .collect();
            indexes.sort_unstable();
            assert_eq!(indexes, ["by-type", "by-zone", "unavailable"]);
            let ttl = ddb
                .describe_time_to_live()
                .table_name(&name)
                .send()
                .await
                .unwrap();
            let ttl = ttl.time_to_live_description().unwrap();
            assert_eq!(ttl.attribute_name(), Some("expires_at"));
        });
    }
}
