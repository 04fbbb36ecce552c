//! Integration tests: see the module list.
