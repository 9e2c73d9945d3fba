//! Faithful simulators of the providers' payout APIs, for tests, the demo and the chaos run.
