//! Every session (`testsuite::sessions`) on the reference backend in its checking mode.

use backend_ref::RefBackend;
use testsuite::sessions::sessions;

#[test]
fn every_session_passes_on_the_reference() {
    let backend = RefBackend::checking();
    let failures: Vec<String> = sessions()
        .iter()
        .filter_map(|s| {
            (s.check)(&backend)
                .err()
                .map(|e| format!("{}: {e}", s.name))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A session fails when the backend misbehaves: here one whose outputs are dropped.
#[test]
fn a_session_can_fail() {
    struct NoOutputs(RefBackend);
    struct Exe(Box<dyn tir_lower::Executable>);
    impl tir_lower::Backend for NoOutputs {
        fn name(&self) -> &'static str {
            "no-outputs"
        }
        fn target(&self) -> tir_lower::Target {
            self.0.target()
        }
        fn capabilities(&self) -> tir_lower::Capabilities {
            self.0.capabilities()
        }
        fn compile(
            &self,
            program: &tir_lower::Program,
        ) -> Result<Box<dyn tir_lower::Executable>, tir_lower::BackendError> {
            Ok(Box::new(Exe(self.0.compile(program)?)))
        }
    }
    use tir_lower::{BackendError, DeviceTensor, HostTensors, TensorRef};
    impl tir_lower::Executable for Exe {
        fn signature(&self) -> &tir_lower::Signature {
            self.0.signature()
        }
        fn device(&self) -> tir_lower::Device {
            self.0.device()
        }
        fn set_parameter(&mut self, n: &str, v: TensorRef<'_>) -> Result<(), BackendError> {
            self.0.set_parameter(n, v)
        }
        fn run(&mut self, i: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError> {
            self.0.run(i).map(|_| HostTensors::new())
        }
        fn run_on_device(
            &mut self,
            i: &[(&str, TensorRef<'_>)],
        ) -> Result<std::collections::BTreeMap<String, DeviceTensor>, BackendError> {
            self.0.run_on_device(i)
        }
        fn to_device(
            &mut self,
            t: &tir_graph::HostTensor<'_>,
        ) -> Result<DeviceTensor, BackendError> {
            self.0.to_device(t)
        }
        fn alloc_host(
            &self,
            d: tir_graph::DType,
            dims: &[u64],
        ) -> Result<tir_graph::HostTensor<'static>, BackendError> {
            self.0.alloc_host(d, dims)
        }
        fn states(&self) -> Result<HostTensors, BackendError> {
            self.0.states()
        }
    }
    let backend = NoOutputs(RefBackend::checking());
    let failed: Vec<&str> = sessions()
        .iter()
        .filter(|s| (s.check)(&backend).is_err())
        .map(|s| s.name)
        .collect();
    for name in [
        "decode_loop_on_device",
        "weights_from_safetensors",
        "host_memory_of_either_kind",
    ] {
        assert!(failed.contains(&name), "{name} passed: {failed:?}");
    }
}
