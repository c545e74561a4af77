//! config.json and the control socket's messages: JSON from outside the runtime.
//!
//! - [`run_spec`]: `serde_json` → `oci_spec::runtime::Spec`, the step `Bundle::load` starts
//!   with; a spec that parses must serialize and parse again.
//! - [`run_control`]: a control-socket request line → `Request` (the real enum, from the
//!   torpor library's `control`); what parses must round-trip to the same wire form. The
//!   response parser (`Response`, read by the CLI) gets the same bytes.

use oci_spec::runtime::Spec;

use torpor::control::{Request, Response};

/// The `oci_spec` harness.
pub fn run_spec(data: &[u8]) {
    let Ok(spec) = serde_json::from_slice::<Spec>(data) else {
        return;
    };
    let text = serde_json::to_string(&spec).expect("a parsed spec serializes");
    let again: Spec = serde_json::from_str(&text).expect("a serialized spec parses");
    let text2 = serde_json::to_string(&again).expect("serializes");
    assert_eq!(text, text2, "config.json does not round-trip");
    // The accessors Bundle::load reads.
    let _ = (
        spec.version(),
        spec.root(),
        spec.process(),
        spec.linux(),
        spec.mounts(),
    );
    let _ = (spec.hooks(), spec.annotations(), spec.hostname());
}

/// The `control` harness.
pub fn run_control(data: &[u8]) {
    // The daemon reads one line and trims it.
    let line = data.split(|&b| b == b'\n').next().unwrap_or_default();
    if let Ok(req) = serde_json::from_slice::<Request>(line) {
        let wire = serde_json::to_string(&req).expect("a request serializes");
        let again: Request = serde_json::from_str(&wire).expect("its wire form parses");
        assert_eq!(serde_json::to_string(&again).expect("serializes"), wire);
    }
    if let Ok(resp) = serde_json::from_slice::<Response>(data) {
        let _ = serde_json::to_string(&resp).expect("a response serializes");
    }
}
