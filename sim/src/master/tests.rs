//! Unit tests of the simulated master.
