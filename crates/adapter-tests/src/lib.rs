//! Holds no code: this crate's tests and benchmark prove the store and rail adapters against real databases and nodes, with the test kit, which itself depends on the adapters.
