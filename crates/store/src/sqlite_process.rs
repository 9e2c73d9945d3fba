//! SQLite settings payoutd makes itself: process-wide ones before the first database of the process opens, and each connection's when it opens.

/// Turns off SQLite's memory statistics for this process, once, before its first database opens.
///
/// With them on, every SQLite allocation in the process takes one global mutex, so connections
/// working on different CPUs queue on it (the simulator's parallel seeds ran 20% slower than the
/// same seeds in separate processes). payoutd reads none of those statistics and sets no soft heap
/// limit. Once SQLite is initialised the call is refused and changes nothing.
pub(crate) fn without_memory_statistics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SQLITE_CONFIG_MEMSTATUS takes exactly one int argument. sqlite3_config must not
        // run while another thread uses SQLite: every SQLite database of payoutd opens through
        // `SqliteStore::connect`, which waits here until the call has returned. If SQLite was
        // initialised anyway, the call is refused (SQLITE_MISUSE) and changes nothing.
        let _refused_if_initialised = unsafe {
            libsqlite3_sys::sqlite3_config(
                libsqlite3_sys::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
    });
}

/// Holds a connection's query plans to each statement's text (SQLite's query planner stability
/// guarantee), so a prepared statement is parsed once per connection.
///
/// Without it SQLite plans a statement with its bound values where they could change the plan (a
/// `LIMIT ?`, a range over an index), and parses the statement again whenever such a value
/// changes: the sweeps' and queues' limits change from call to call, and re-parsing took 8% of the
/// simulator's CPU. payoutd's statements are written for their indexes, not for particular values.
pub(crate) async fn with_stable_plans(
    connection: &mut sqlx::sqlite::SqliteConnection,
) -> Result<(), sqlx::Error> {
    if planner_stability(connection, QPSG_ON).await? {
        Ok(())
    } else {
        Err(sqlx::Error::Configuration("SQLite left its query planner stability off".into()))
    }
}

/// Whether a connection holds its query plans to each statement's text ([`with_stable_plans`]).
#[cfg(test)]
pub(crate) async fn plans_are_stable(
    connection: &mut sqlx::sqlite::SqliteConnection,
) -> Result<bool, sqlx::Error> {
    planner_stability(connection, QPSG_UNCHANGED).await
}

/// `SQLITE_DBCONFIG_ENABLE_QPSG`'s first argument: turn the guarantee on.
const QPSG_ON: std::ffi::c_int = 1;
/// `SQLITE_DBCONFIG_ENABLE_QPSG`'s first argument: leave the setting as it is (only read it).
#[cfg(test)]
const QPSG_UNCHANGED: std::ffi::c_int = -1;

/// Sets the connection's query planner stability to `setting` (or leaves it, with -1) and returns
/// whether it is on after the call.
async fn planner_stability(
    connection: &mut sqlx::sqlite::SqliteConnection,
    setting: std::ffi::c_int,
) -> Result<bool, sqlx::Error> {
    let mut handle = connection.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let mut now: std::ffi::c_int = -1;
    // SAFETY: `db` is the open connection the locked handle owns for the duration of the call.
    // SQLITE_DBCONFIG_ENABLE_QPSG takes an int (1 on, 0 off, negative unchanged) and a pointer to an
    // int that receives the setting after the call.
    let rc = unsafe {
        libsqlite3_sys::sqlite3_db_config(
            db,
            libsqlite3_sys::SQLITE_DBCONFIG_ENABLE_QPSG,
            setting,
            &raw mut now,
        )
    };
    if rc != libsqlite3_sys::SQLITE_OK {
        return Err(sqlx::Error::Configuration(
            format!("SQLite refused its query planner stability setting ({rc})").into(),
        ));
    }
    Ok(now == 1)
}
