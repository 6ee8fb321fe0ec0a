//! The Docker / containers-common template dialect, evaluated the way
//! CRI-O does (containers/common `setupSeccomp`): `archMap` picks the
//! native architecture's entry, `includes`/`excludes` filter rules by
//! architecture, capabilities and kernel version, `name` becomes `names`.

use crate::decode::DObj;
use crate::diagnostic::{Code, Diagnostic};
use crate::filter::Arch;
use crate::model::{tpl_arch, tpl_filter, tpl_seccomp, tpl_syscall, ArgCond, Seccomp, SyscallRule};

/// What the template is evaluated against.
#[derive(Debug, Clone)]
pub struct TemplateContext {
    pub arch: Arch,
    /// Bounding capabilities of the container, `CAP_*` spelling.
    pub capabilities: Vec<String>,
    /// Kernel version (major, minor).
    pub kernel: (u32, u32),
}

/// CRI-O's default capabilities (crio.conf `default_capabilities`).
pub const CRIO_DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_KILL",
];

impl TemplateContext {
    pub fn for_host(arch: Arch) -> TemplateContext {
        TemplateContext {
            arch,
            capabilities: CRIO_DEFAULT_CAPS.iter().map(|c| c.to_string()).collect(),
            kernel: host_kernel().unwrap_or((0, 0)),
        }
    }
}

/// `uname -r` as (major, minor).
pub fn host_kernel() -> Option<(u32, u32)> {
    // The running kernel does not change under us; read it once, not per lint.
    static KERNEL: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        parse_kernel(release.trim())
    })
}

pub fn parse_kernel(s: &str) -> Option<(u32, u32)> {
    let mut it = s.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Go's `runtime.GOARCH` names used in `includes.arches`/`excludes.arches`.
pub fn go_arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::X86 => "386",
        Arch::X86_64 => "amd64",
        Arch::X32 => "x32",
        Arch::Arm => "arm",
        Arch::Aarch64 => "arm64",
        Arch::Mips => "mips",
        Arch::Mips64 => "mips64",
        Arch::Mips64N32 => "mips64n32",
        Arch::Mipsel => "mipsle",
        Arch::Mipsel64 => "mips64le",
        Arch::Mipsel64N32 => "mips64len32",
        Arch::Ppc => "ppc",
        Arch::Ppc64 => "ppc64",
        Arch::Ppc64Le => "ppc64le",
        Arch::Riscv64 => "riscv64",
        Arch::S390 => "s390",
        Arch::S390X => "s390x",
    }
}

/// Evaluate a value decoded with [`crate::model::TPL_SECCOMP`].
// A diagnostic is what callers report; it is built once per file, so its size does not matter.
#[allow(clippy::result_large_err)]
pub fn evaluate(mut root: DObj, ctx: &TemplateContext) -> Result<Seccomp, Diagnostic> {
    let arch_map = root.take_obj_list(tpl_seccomp::ARCH_MAP);
    if !root.str_list(tpl_seccomp::ARCHITECTURES).is_empty() && !arch_map.is_empty() {
        return Err(Diagnostic::error(
            Code::TemplateConflict,
            "/archMap",
            "both `architectures` and `archMap` are set; CRI-O refuses such a profile",
        )
        .with_help("keep one of them"));
    }
    let mut out = Seccomp {
        default_action: root.take_str(tpl_seccomp::DEFAULT_ACTION),
        default_errno_ret: root.opt_uint(tpl_seccomp::DEFAULT_ERRNO_RET),
        architectures: root.take_str_list(tpl_seccomp::ARCHITECTURES),
        listener_path: root.take_str(tpl_seccomp::LISTENER_PATH),
        listener_metadata: root.take_str(tpl_seccomp::LISTENER_METADATA),
        flags: root.take_str_list(tpl_seccomp::FLAGS),
        syscalls: Vec::new(),
    };
    if let Some(entry) = arch_map
        .iter()
        .find(|a| a.str(tpl_arch::ARCHITECTURE) == ctx.arch.scmp_name())
    {
        out.architectures
            .push(entry.str(tpl_arch::ARCHITECTURE).to_string());
        out.architectures
            .extend(entry.str_list(tpl_arch::SUB_ARCHITECTURES).iter().cloned());
    }
    let arch = go_arch_name(ctx.arch);
    let has_cap = |c: &String| ctx.capabilities.iter().any(|h| h == c);
    let kernel_at_least = |v: &str| parse_kernel(v).is_some_and(|want| ctx.kernel >= want);
    for mut call in root.take_obj_list(tpl_seccomp::SYSCALLS) {
        let includes = call.obj(tpl_syscall::INCLUDES);
        let excludes = call.obj(tpl_syscall::EXCLUDES);
        if let Some(ex) = excludes {
            let min_kernel = ex.str(tpl_filter::MIN_KERNEL);
            if ex.str_list(tpl_filter::ARCHES).iter().any(|a| a == arch)
                || ex.str_list(tpl_filter::CAPS).iter().any(has_cap)
                || (!min_kernel.is_empty() && kernel_at_least(min_kernel))
            {
                continue;
            }
        }
        if let Some(inc) = includes {
            let arches = inc.str_list(tpl_filter::ARCHES);
            let min_kernel = inc.str(tpl_filter::MIN_KERNEL);
            if (!arches.is_empty() && !arches.iter().any(|a| a == arch))
                || !inc.str_list(tpl_filter::CAPS).iter().all(has_cap)
                || (!min_kernel.is_empty() && !kernel_at_least(min_kernel))
            {
                continue;
            }
        }
        let name = call.str(tpl_syscall::NAME);
        let names = call.str_list(tpl_syscall::NAMES);
        if !name.is_empty() && !names.is_empty() {
            return Err(Diagnostic::error(
                Code::TemplateConflict,
                format!("{}/name", call.pointer),
                "both `name` and `names` are set in one rule; CRI-O refuses such a profile",
            ));
        }
        let names = if name.is_empty() {
            call.take_str_list(tpl_syscall::NAMES)
        } else {
            vec![call.take_str(tpl_syscall::NAME)]
        };
        if names.is_empty() {
            continue;
        }
        out.syscalls.push(SyscallRule {
            names,
            action: call.take_str(tpl_syscall::ACTION),
            errno_ret: call.opt_uint(tpl_syscall::ERRNO_RET),
            args: call
                .take_obj_list(tpl_syscall::ARGS)
                .into_iter()
                .map(ArgCond::from_decoded)
                .collect(),
            pointer: call.pointer,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use crate::json::parse;
    use crate::model::TPL_SECCOMP;

    fn ctx() -> TemplateContext {
        TemplateContext {
            arch: Arch::X86_64,
            capabilities: vec!["CAP_SYS_ADMIN".into()],
            kernel: (5, 10),
        }
    }

    /// The profile, or the code and pointer of the refusal.
    fn eval(src: &str) -> Result<Seccomp, (Code, String)> {
        let mut node = parse(src.as_bytes()).unwrap();
        let decoded = decode(&mut node, &TPL_SECCOMP);
        assert!(decoded.type_error.is_none());
        evaluate(decoded.root, &ctx()).map_err(|d| (d.code, d.pointer))
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Every field the evaluation reads, each with a value of its own, and
    /// each condition of `includes`/`excludes` deciding one rule alone (the
    /// conditions are `||`ed, so a rule that passes reads all three).
    #[test]
    fn evaluation_reads_every_field() {
        let p = eval(
            r#"{
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 1,
            "defaultErrno": "EPERM",
            "listenerPath": "/run/agent.sock",
            "listenerMetadata": "meta",
            "archMap": [
                {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
                {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}
            ],
            "flags": ["SECCOMP_FILTER_FLAG_SPEC_ALLOW"],
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "c",
                 "args": [{"index": 1, "value": 2, "valueTwo": 3, "op": "SCMP_CMP_EQ"}]},
                {"name": "mount", "action": "SCMP_ACT_ALLOW",
                 "includes": {"caps": ["CAP_SYS_ADMIN"], "arches": ["amd64"], "minKernel": "4.8"}},
                {"names": ["umount2"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38, "errno": "ENOSYS",
                 "excludes": {"caps": ["CAP_NET_ADMIN"], "arches": ["arm64"], "minKernel": "6.0"}},
                {"names": ["included_arch"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm64"]}},
                {"names": ["included_cap"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_BPF"]}},
                {"names": ["included_kernel"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "6.1"}},
                {"names": ["excluded_arch"], "action": "SCMP_ACT_ALLOW", "excludes": {"arches": ["amd64"]}},
                {"names": ["excluded_cap"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["excluded_kernel"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "5.4"}},
                {"names": [], "action": "SCMP_ACT_ALLOW"}
            ]
        }"#,
        )
        .unwrap();
        assert_eq!(
            p,
            Seccomp {
                default_action: "SCMP_ACT_ERRNO".into(),
                default_errno_ret: Some(1),
                architectures: strings(&["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
                flags: strings(&["SECCOMP_FILTER_FLAG_SPEC_ALLOW"]),
                listener_path: "/run/agent.sock".into(),
                listener_metadata: "meta".into(),
                syscalls: vec![
                    SyscallRule {
                        names: strings(&["read"]),
                        action: "SCMP_ACT_ALLOW".into(),
                        errno_ret: None,
                        args: vec![ArgCond {
                            index: 1,
                            value: 2,
                            value_two: 3,
                            op: "SCMP_CMP_EQ".into(),
                            pointer: "/syscalls/0/args/0".into(),
                        }],
                        pointer: "/syscalls/0".into(),
                    },
                    SyscallRule {
                        names: strings(&["mount"]),
                        action: "SCMP_ACT_ALLOW".into(),
                        errno_ret: None,
                        args: vec![],
                        pointer: "/syscalls/1".into(),
                    },
                    SyscallRule {
                        names: strings(&["umount2"]),
                        action: "SCMP_ACT_ERRNO".into(),
                        errno_ret: Some(38),
                        args: vec![],
                        pointer: "/syscalls/2".into(),
                    },
                ],
            }
        );
    }

    #[test]
    fn architectures_come_through_without_an_arch_map() {
        let p =
            eval(r#"{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"]}"#)
                .unwrap();
        assert_eq!(p.architectures, strings(&["SCMP_ARCH_X86_64"]));
    }

    #[test]
    fn conflicts_crio_refuses() {
        let both = r#"{"architectures": ["SCMP_ARCH_X86_64"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}"#;
        assert_eq!(
            eval(both),
            Err((Code::TemplateConflict, "/archMap".to_string()))
        );
        let both = r#"{"syscalls": [{"names": ["read"]}, {"name": "write", "names": ["read"]}]}"#;
        assert_eq!(
            eval(both),
            Err((Code::TemplateConflict, "/syscalls/1/name".to_string()))
        );
    }
}
