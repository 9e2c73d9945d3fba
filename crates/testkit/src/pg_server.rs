//! A private PostgreSQL server for tests whose database loses its last commits: made with `initdb` in a temporary directory from Debian's server binaries, backed up with `pg_basebackup` while it runs, stopped at once, and a backup started as a server of its own (a restore).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The server binaries' parent directory on Debian (`/usr/lib/postgresql/<major>/bin`).
const PG_LIB_DIR: &str = "/usr/lib/postgresql";
/// The operating-system user the server runs as when the tests run as root (PostgreSQL refuses
/// root).
const PG_OS_USER: &str = "postgres";

/// One server on 127.0.0.1 with its own data directory; stopped at once and removed on drop.
pub struct PgServer {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
}

impl PgServer {
    /// A new server (trust authentication, replication allowed from 127.0.0.1), started.
    pub fn start_new() -> PgServer {
        let server = PgServer::at(fresh_dir(), free_port());
        let data = server.data_dir();
        server.run("initdb", &["-D", path(&data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]);
        server.configure();
        server.start();
        server
    }

    /// A base backup of this running server (`pg_basebackup -X stream`): what a restore from the
    /// backup would hold. Not started.
    pub fn base_backup(&self) -> PgServer {
        let backup = PgServer::at(fresh_dir(), free_port());
        let port = self.port.to_string();
        let data = backup.data_dir();
        self.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                path(&data),
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        backup.configure();
        backup
    }

    /// The URL of its `postgres` database, for creating test databases on it.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn start(&self) {
        let log = self.dir.join("server.log");
        self.run("pg_ctl", &["-D", path(&self.data_dir()), "-l", path(&log), "-w", "start"]);
    }

    /// SIGQUIT to every server process: no checkpoint, as a crash or a pulled plug leaves it.
    pub fn stop_at_once(&self) {
        self.run("pg_ctl", &["-D", path(&self.data_dir()), "-m", "immediate", "-w", "stop"]);
    }

    fn at(dir: PathBuf, port: u16) -> PgServer {
        let bin = server_bin_dir();
        if running_as_root() {
            let status = Command::new("chown").args([PG_OS_USER, path(&dir)]).status();
            assert!(status.is_ok_and(|s| s.success()), "chown {} to {PG_OS_USER}", dir.display());
        }
        PgServer { dir, port, bin }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Its own port and socket directory (a backup copies its source's `postgresql.conf`: the
    /// lines added last win).
    fn configure(&self) {
        let conf = format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\n",
            self.port,
            self.dir.display()
        );
        let file = self.data_dir().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&file).expect("read postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&file, text).expect("write postgresql.conf");
    }

    /// Runs one of the server's programs, as the server's user when the tests run as root.
    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        if !running_as_root() {
            return Command::new(exe);
        }
        let mut command = Command::new("runuser");
        command.args(["-u", PG_OS_USER, "--"]).arg(exe);
        command
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ =
            self.command("pg_ctl").args(["-D", path(&data), "-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest installed server's binaries; a missing server is a failure, never a skip.
fn server_bin_dir() -> PathBuf {
    let mut majors: Vec<u32> = std::fs::read_dir(PG_LIB_DIR)
        .unwrap_or_else(|e| {
            panic!("PostgreSQL's server binaries are required under {PG_LIB_DIR}: {e}")
        })
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    majors.sort_unstable();
    let major = majors.last().unwrap_or_else(|| panic!("no PostgreSQL server under {PG_LIB_DIR}"));
    Path::new(PG_LIB_DIR).join(major.to_string()).join("bin")
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn fresh_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("payoutd-pg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("create the server's directory");
    dir
}

/// A port nothing listens on now (the kernel's pick, released at once).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().expect("port").port()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}
