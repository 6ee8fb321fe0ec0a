//! Error messages users read, pinned: a change here is a change in what an SRE sees.

use nodeproof::sandbox::SandboxError;
use nodeproof_seccomp::cbpf::BpfError;
use nodeproof_seccomp::compiler::{CompileError, Errno};
use nodeproof_seccomp::filter::{Action, Arch};

#[test]
fn compile_errors() {
    let cases: Vec<(CompileError, &str)> = vec![
        (
            CompileError::AddRule {
                syscall: "mkdir".into(),
                action: Action::Errno(5000),
                pointer: "/syscalls/2".into(),
                source: Errno(libc::EINVAL),
            },
            "libseccomp rejected the rule for syscall mkdir (SCMP_ACT_ERRNO(5000)) at /syscalls/2",
        ),
        (
            CompileError::AddArch {
                arch: Arch::X32,
                source: Errno(libc::EINVAL),
            },
            "cannot add architecture SCMP_ARCH_X32 to the filter",
        ),
        (
            CompileError::BadArgIndex {
                syscall: "ioctl".into(),
                pointer: "/syscalls/0".into(),
                index: 7,
            },
            "argument index 7 of syscall ioctl at /syscalls/0 is out of range (0-5)",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}

#[test]
fn bpf_and_sandbox_errors() {
    assert_eq!(BpfError::Empty.to_string(), "program is empty");
    assert_eq!(
        BpfError::JumpOutOfRange { pc: 3 }.to_string(),
        "instruction 3: jump lands outside the program"
    );
    assert_eq!(SandboxError::EmptyCommand.to_string(), "no command given");
    assert_eq!(
        SandboxError::NulInArgument { index: 2 }.to_string(),
        "argument 2 contains a NUL byte"
    );
}
