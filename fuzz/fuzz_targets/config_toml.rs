//! The `sluice serve --config` file (TOML, read at start by an operator's
//! hand or a deployment tool): `ServeConfig::check_text` runs the same
//! parse and checks as `--config` (unknown keys, addresses, port ranges,
//! `[engine]` values, `[[user]]` password hashes) with no file access.
//! Properties: never panics; a refusal has a message; an accepted config
//! has the limits the checks promise (at least one session, a non-zero
//! idle timeout, a backlog of at least 1).
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_server::config::ServeConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ServeConfig::check_text(text) {
        Ok(c) => {
            assert!(c.max_sessions >= 1);
            assert!(!c.idle_timeout.is_zero());
            assert!(c.listen_backlog >= 1);
            if let Some((lo, hi)) = c.pasv_ports {
                assert!(lo >= 1 && lo <= hi);
            }
            let _ = c.engine_config(sluice_engine::EngineConfig::default());
        }
        Err(e) => assert!(!format!("{e:#}").is_empty()),
    }
});
