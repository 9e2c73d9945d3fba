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
