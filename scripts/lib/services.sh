#!/usr/bin/env bash
# Shared by scripts/: make sure the services the tests and demo need are up, starting them when they are not.
# Under CI=true a service that cannot be had is a failure, never a skip.

PG_HOST="${PG_HOST:-127.0.0.1}"
PG_PORT="${PG_PORT:-5432}"
REDIS_PORT="${REDIS_PORT:-6379}"

die() { echo "error: $*" >&2; exit 1; }

ensure_postgres() {
    if pg_isready -h "$PG_HOST" -p "$PG_PORT" -q 2>/dev/null; then return 0; fi
    echo "PostgreSQL is not answering on $PG_HOST:$PG_PORT; starting it" >&2
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
        command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and apt-get is unavailable"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null \
            || die "could not install PostgreSQL"
    fi
    local version
    version="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)"
    if [ -n "$version" ]; then
        pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
    fi
    if ! pg_isready -h "$PG_HOST" -p "$PG_PORT" -q 2>/dev/null; then
        # No cluster to start: make a project-local one (initdb refuses root, so run it as postgres).
        local dir="${PAYOUTD_PGDATA:-/tmp/payoutd-pgdata}"
        local bin
        bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
        [ -n "$bin" ] || die "no PostgreSQL server binaries found"
        if [ ! -f "$dir/PG_VERSION" ]; then
            mkdir -p "$dir" && chown postgres "$dir"
            su postgres -c "$bin/initdb -D $dir -A trust -U postgres" >/dev/null || die "initdb failed"
        fi
        su postgres -c "$bin/pg_ctl -D $dir -l $dir/log -o '-p $PG_PORT -k $dir -c listen_addresses=$PG_HOST' -w start" >/dev/null \
            || die "could not start PostgreSQL"
    fi
    for _ in $(seq 1 30); do
        pg_isready -h "$PG_HOST" -p "$PG_PORT" -q 2>/dev/null && return 0
        sleep 1
    done
    die "PostgreSQL did not become ready on $PG_HOST:$PG_PORT"
}

ensure_redis() {
    if redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then return 0; fi
    echo "Redis is not answering on 127.0.0.1:$REDIS_PORT; starting it" >&2
    if ! command -v redis-server >/dev/null 2>&1; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
            || die "could not install Redis"
    fi
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no >/dev/null \
        || die "could not start Redis"
    for _ in $(seq 1 20); do
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.5
    done
    die "Redis did not become ready"
}

# Test databases are named payoutd_t_<uuid>. A DROP DATABASE costs PostgreSQL about 75 ms here
# (a run leaves about 400), so scripts/test drops them while it compiles or runs other tests.
list_test_databases() {
    psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -Atc \
        "SELECT datname FROM pg_database WHERE datname LIKE 'payoutd\_t\_%'" 2>/dev/null || true
}

# Drops the databases named on stdin (one a line), in one session; one still in use is left.
drop_databases() {
    sed -e '/^$/d' -e 's/.*/DROP DATABASE IF EXISTS "&";/' |
        psql -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -q -f - >/dev/null 2>&1 || true
}

drop_test_databases() {
    list_test_databases | drop_databases
}

# The local Solana node (tools/solana-node, about 1,000 crates: minutes on two cores) is built once
# per machine: its target directory is outside the clone (PAYOUTD_SOLANA_NODE_TARGET), so every
# clone on the machine shares it (cargo rebuilds what changed and locks it against two builds at
# once), and the binary is copied into the clone at .tools/bin/payoutd-solana-node.
SOLANA_NODE_TARGET="${PAYOUTD_SOLANA_NODE_TARGET:-${XDG_CACHE_HOME:-$HOME/.cache}/payoutd/solana-node-target}"

build_solana_node() {
    local root="$1" bin="$1/.tools/bin/payoutd-solana-node"
    cargo build --quiet --locked --manifest-path "$root/tools/solana-node/Cargo.toml" --target-dir "$SOLANA_NODE_TARGET" \
        || die "the local Solana node did not build (tools/solana-node)"
    mkdir -p "$root/.tools/bin"
    if ! cmp -s "$SOLANA_NODE_TARGET/debug/payoutd-solana-node" "$bin"; then
        cp -f "$SOLANA_NODE_TARGET/debug/payoutd-solana-node" "$bin"
    fi
}

# The lints run as the code compiles: the scripts' debug builds compile the workspace's own crates
# with clippy's driver (rustc with clippy's lints, the artifacts the same), dependencies with plain
# rustc, exactly as `cargo clippy` arranges it. `cargo clippy` itself type-checks every dependency
# again in check mode, a build that shares nothing with the test build (about 4 minutes of a fresh
# clone's test run on 2 cores). The lints: clippy's defaults and every function's length and
# arguments (clippy.toml), as errors. The scripts' builds share one set of artifacts; a plain
# `cargo build` compiles the workspace's crates again without the lints. Release builds (the
# benchmarks, scripts/sim) never take this driver.
lint_while_compiling() {
    local driver
    driver="$(rustc --print sysroot)/bin/clippy-driver"
    [ -x "$driver" ] || die "clippy is required (rustup component add clippy)"
    export RUSTC_WORKSPACE_WRAPPER="$driver"
    # Warnings as errors, as `cargo clippy -- -D warnings` passes them (cargo-clippy's own way of
    # passing flags to its driver); the lints themselves are the workspace's (Cargo.toml `[lints]`).
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}

# The shipped crates with every target (binaries, tests, benchmarks, examples), linted as they
# compile: the build scripts/setup makes and scripts/test's build.
build_the_workspace() {
    build_the_shipped_crates --all-targets "$@"
}

# Only the workspace's binaries (payoutd and the demo, chaos and memory drivers), for
# scripts/demo, scripts/chaos and scripts/bench-memory. Built over the whole workspace, cargo gives
# their dependencies the same features as build_the_workspace does (the test kit, a dependency of
# the drivers, asks for what the tests' own dependencies ask for), so after scripts/setup or the
# test build nothing is compiled again; `cargo build -p payoutd` alone would resolve fewer features
# and compile most of the tree a second time (85 s on two cores).
build_the_binaries() {
    build_the_shipped_crates --bins "$@"
}

# The simulator is left out, so its deliberate defects are never in target/debug/payoutd (checked).
build_the_shipped_crates() {
    lint_while_compiling
    cargo build --workspace --exclude payoutd-sim "$@" || die "the build or its lints failed: see above"
    refuse_a_binary_with_defects
}

refuse_a_binary_with_defects() {
    if grep -q "defect: timeout taken as failure" "$root/target/debug/payoutd"; then
        die "target/debug/payoutd was built with the simulator's deliberate defects"
    fi
}

# The lint gate must be able to fail: a known lint, compiled the way the builds are, is refused.
check_the_lint_gate() {
    local dir
    dir="$(mktemp -d)"
    printf '//! A known lint.\npub fn length(bytes: &Vec<u8>) -> usize {\n    bytes.len()\n}\n' > "$dir/gate.rs"
    if "$RUSTC_WORKSPACE_WRAPPER" --edition 2024 --crate-type lib --emit=metadata \
        -o "$dir/gate.rmeta" "$dir/gate.rs" >/dev/null 2>&1; then
        rm -rf "$dir"
        die "the lint gate let a known lint through: clippy's driver ignored CLIPPY_ARGS"
    fi
    rm -rf "$dir"
}
