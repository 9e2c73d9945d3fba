//! The provider rail's integration tests, one binary: each adapter against its simulator, conformance to the providers' published documents.

mod support;

mod conformance;
mod lookups_at_volume;
mod provider_books;
mod providers;
mod routing;
