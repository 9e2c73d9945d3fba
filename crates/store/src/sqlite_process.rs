//! Process-wide SQLite settings, made once before the first database of the process opens.

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
/// changes: the sweeps' and queues' limits change from call to call, and re-parsing took about a
/// tenth of the simulator's CPU. payoutd's statements are written for their indexes, not for
/// particular values.
pub(crate) async fn with_stable_plans(
    connection: &mut sqlx::sqlite::SqliteConnection,
) -> Result<(), sqlx::Error> {
    let mut handle = connection.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    // SAFETY: `db` is the open connection the locked handle owns for the duration of the call.
    // SQLITE_DBCONFIG_ENABLE_QPSG takes an int (1: on) and an int pointer for the new setting,
    // which may be null.
    let rc = unsafe {
        libsqlite3_sys::sqlite3_db_config(
            db,
            libsqlite3_sys::SQLITE_DBCONFIG_ENABLE_QPSG,
            1 as std::ffi::c_int,
            std::ptr::null_mut::<std::ffi::c_int>(),
        )
    };
    if rc != libsqlite3_sys::SQLITE_OK {
        return Err(sqlx::Error::Configuration(
            format!("SQLite refused its query planner stability setting ({rc})").into(),
        ));
    }
    Ok(())
}

/// Whether a connection holds its query plans to each statement's text ([`with_stable_plans`]).
#[cfg(test)]
pub(crate) async fn plans_are_stable(
    connection: &mut sqlx::sqlite::SqliteConnection,
) -> Result<bool, sqlx::Error> {
    let mut handle = connection.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let mut setting: std::ffi::c_int = -1;
    // SAFETY: as in `with_stable_plans`; -1 leaves the setting as it is and writes it to `setting`.
    let rc = unsafe {
        libsqlite3_sys::sqlite3_db_config(
            db,
            libsqlite3_sys::SQLITE_DBCONFIG_ENABLE_QPSG,
            -1 as std::ffi::c_int,
            &raw mut setting,
        )
    };
    if rc != libsqlite3_sys::SQLITE_OK {
        return Err(sqlx::Error::Configuration(
            format!("SQLite refused to read its query planner stability setting ({rc})").into(),
        ));
    }
    Ok(setting == 1)
}
