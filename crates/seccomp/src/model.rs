//! The profile as the runtime holds it after decoding: the OCI runtime-spec
//! `LinuxSeccomp` struct (what containerd hands to runc), and the Docker /
//! containers-common template struct that CRI-O and Docker read.

use crate::decode::{schema, DObj};

// ---- OCI runtime-spec (github.com/opencontainers/runtime-spec/specs-go) ----

schema! {
    pub static OCI_ARG, mod oci_arg: "LinuxSeccompArg" = "specs.LinuxSeccompArg" {
        INDEX: Uint = "index", "uint";
        VALUE: Uint = "value", "uint64";
        VALUE_TWO: Uint = "valueTwo", "uint64";
        OP: Str = "op", "specs.LinuxSeccompOperator";
    }
}

schema! {
    pub static OCI_SYSCALL, mod oci_syscall: "LinuxSyscall" = "specs.LinuxSyscall" {
        NAMES: StrList = "names", "[]string";
        ACTION: Str = "action", "specs.LinuxSeccompAction";
        ERRNO_RET: OptUint = "errnoRet", "uint";
        ARGS: ObjList(&OCI_ARG) = "args", "[]specs.LinuxSeccompArg";
    }
}

schema! {
    pub static OCI_SECCOMP, mod oci_seccomp: "LinuxSeccomp" = "specs.LinuxSeccomp" {
        DEFAULT_ACTION: Str = "defaultAction", "specs.LinuxSeccompAction";
        DEFAULT_ERRNO_RET: OptUint = "defaultErrnoRet", "uint";
        ARCHITECTURES: StrList = "architectures", "[]specs.Arch";
        FLAGS: StrList = "flags", "[]specs.LinuxSeccompFlag";
        LISTENER_PATH: Str = "listenerPath", "string";
        LISTENER_METADATA: Str = "listenerMetadata", "string";
        SYSCALLS: ObjList(&OCI_SYSCALL) = "syscalls", "[]specs.LinuxSyscall";
    }
}

// ---- containers/common pkg/seccomp (the template CRI-O and Docker read) ----

schema! {
    pub static TPL_FILTER, mod tpl_filter: "Filter" = "seccomp.Filter" {
        CAPS: StrList = "caps", "[]string";
        ARCHES: StrList = "arches", "[]string";
        MIN_KERNEL: Str = "minKernel", "string";
    }
}

schema! {
    pub static TPL_ARCH, mod tpl_arch: "Architecture" = "seccomp.Architecture" {
        ARCHITECTURE: Str = "architecture", "seccomp.Arch";
        SUB_ARCHITECTURES: StrList = "subArchitectures", "[]seccomp.Arch";
    }
}

schema! {
    pub static TPL_SYSCALL, mod tpl_syscall: "Syscall" = "seccomp.Syscall" {
        NAME: Str = "name", "string";
        NAMES: StrList = "names", "[]string";
        ACTION: Str = "action", "seccomp.Action";
        ARGS: ObjList(&OCI_ARG) = "args", "[]*seccomp.Arg";
        COMMENT: Str = "comment", "string";
        INCLUDES: Obj(&TPL_FILTER) = "includes", "seccomp.Filter";
        EXCLUDES: Obj(&TPL_FILTER) = "excludes", "seccomp.Filter";
        ERRNO_RET: OptUint = "errnoRet", "uint";
        ERRNO: Str = "errno", "string";
    }
}

schema! {
    pub static TPL_SECCOMP, mod tpl_seccomp: "Seccomp" = "seccomp.Seccomp" {
        DEFAULT_ACTION: Str = "defaultAction", "seccomp.Action";
        DEFAULT_ERRNO_RET: OptUint = "defaultErrnoRet", "uint";
        DEFAULT_ERRNO: Str = "defaultErrno", "string";
        LISTENER_PATH: Str = "listenerPath", "string";
        LISTENER_METADATA: Str = "listenerMetadata", "string";
        ARCHITECTURES: StrList = "architectures", "[]seccomp.Arch";
        ARCH_MAP: ObjList(&TPL_ARCH) = "archMap", "[]seccomp.Architecture";
        SYSCALLS: ObjList(&TPL_SYSCALL) = "syscalls", "[]*seccomp.Syscall";
        FLAGS: StrList = "flags", "[]string";
    }
}

/// `specs.LinuxSeccomp` after decoding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seccomp {
    pub default_action: String,
    pub default_errno_ret: Option<u64>,
    pub architectures: Vec<String>,
    pub flags: Vec<String>,
    pub listener_path: String,
    pub listener_metadata: String,
    pub syscalls: Vec<SyscallRule>,
}

/// `specs.LinuxSyscall` plus the pointer of the JSON object it came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyscallRule {
    pub names: Vec<String>,
    pub action: String,
    pub errno_ret: Option<u64>,
    pub args: Vec<ArgCond>,
    pub pointer: String,
}

/// `specs.LinuxSeccompArg`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgCond {
    pub index: u64,
    pub value: u64,
    pub value_two: u64,
    pub op: String,
    pub pointer: String,
}

impl ArgCond {
    pub fn from_decoded(mut o: DObj) -> ArgCond {
        ArgCond {
            index: o.uint(oci_arg::INDEX),
            value: o.uint(oci_arg::VALUE),
            value_two: o.uint(oci_arg::VALUE_TWO),
            op: o.take_str(oci_arg::OP),
            pointer: o.pointer,
        }
    }
}

impl Seccomp {
    /// View a value decoded with [`OCI_SECCOMP`] (its strings move here).
    pub fn from_oci(mut root: DObj) -> Seccomp {
        Seccomp {
            default_action: root.take_str(oci_seccomp::DEFAULT_ACTION),
            default_errno_ret: root.opt_uint(oci_seccomp::DEFAULT_ERRNO_RET),
            architectures: root.take_str_list(oci_seccomp::ARCHITECTURES),
            flags: root.take_str_list(oci_seccomp::FLAGS),
            listener_path: root.take_str(oci_seccomp::LISTENER_PATH),
            listener_metadata: root.take_str(oci_seccomp::LISTENER_METADATA),
            syscalls: root
                .take_obj_list(oci_seccomp::SYSCALLS)
                .into_iter()
                .map(|mut s| SyscallRule {
                    names: s.take_str_list(oci_syscall::NAMES),
                    action: s.take_str(oci_syscall::ACTION),
                    errno_ret: s.opt_uint(oci_syscall::ERRNO_RET),
                    args: s
                        .take_obj_list(oci_syscall::ARGS)
                        .into_iter()
                        .map(ArgCond::from_decoded)
                        .collect(),
                    pointer: s.pointer,
                })
                .collect(),
        }
    }

    /// No default action and no rules: runc installs no filter at all.
    pub fn disables_seccomp(&self) -> bool {
        self.default_action.is_empty() && self.syscalls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{Schema, Ty, TEMPLATE_KEYS};
    use crate::json::KNOWN_KEYS;

    fn field_names(schema: &'static Schema, out: &mut Vec<&'static str>) {
        for f in schema.fields {
            out.push(f.name);
            if let Ty::Obj(sub) | Ty::ObjList(sub) = f.ty {
                field_names(sub, out);
            }
        }
    }

    #[test]
    fn the_parser_shares_every_schema_key() {
        let mut names = TEMPLATE_KEYS.to_vec();
        field_names(&OCI_SECCOMP, &mut names);
        field_names(&TPL_SECCOMP, &mut names);
        for name in names {
            assert!(
                KNOWN_KEYS.contains(&name),
                "`{name}` missing from json::KNOWN_KEYS"
            );
        }
    }

    /// `defaultErrnoRet` → `DEFAULT_ERRNO_RET`: what a handle is called.
    fn const_name(json_tag: &str) -> String {
        let mut out = String::new();
        for c in json_tag.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }

    fn reachable(schema: &'static Schema, out: &mut Vec<&'static str>) {
        if !out.contains(&schema.go_name) {
            out.push(schema.go_name);
        }
        for f in schema.fields {
            if let Ty::Obj(sub) | Ty::ObjList(sub) = f.ty {
                reachable(sub, out);
            }
        }
    }

    /// The views read fields through handles; if a field moved in its
    /// schema and a handle kept the old index, the handle would read its
    /// neighbour. Every handle must index the field it is named after.
    #[test]
    fn every_field_handle_indexes_the_field_it_is_named_after() {
        // (const name, index, json tag), as `schema!` lists them.
        type Handles = &'static [(&'static str, usize, &'static str)];
        let all: &[(&Schema, Handles)] = &[
            (&OCI_ARG, oci_arg::ALL),
            (&OCI_SYSCALL, oci_syscall::ALL),
            (&OCI_SECCOMP, oci_seccomp::ALL),
            (&TPL_FILTER, tpl_filter::ALL),
            (&TPL_ARCH, tpl_arch::ALL),
            (&TPL_SYSCALL, tpl_syscall::ALL),
            (&TPL_SECCOMP, tpl_seccomp::ALL),
        ];
        let mut schemas = Vec::new();
        reachable(&OCI_SECCOMP, &mut schemas);
        reachable(&TPL_SECCOMP, &mut schemas);
        let mut listed: Vec<_> = all.iter().map(|(s, _)| s.go_name).collect();
        schemas.sort_unstable();
        listed.sort_unstable();
        assert_eq!(
            schemas, listed,
            "a schema without handles, or one listed twice"
        );
        for (schema, handles) in all {
            assert_eq!(
                handles.len(),
                schema.fields.len(),
                "{}: one handle per field",
                schema.go_name
            );
            for &(konst, index, tag) in *handles {
                assert_eq!(
                    schema.fields[index].name, tag,
                    "{}::{konst} indexes the wrong field",
                    schema.go_name
                );
                assert_eq!(schema.index(tag), index, "{}::{konst}", schema.go_name);
                assert_eq!(
                    konst,
                    const_name(tag),
                    "{}: misnamed handle",
                    schema.go_name
                );
            }
        }
        // And spelled out for the fields the views read, independently of the macro.
        assert_eq!(
            OCI_SECCOMP.fields[oci_seccomp::SYSCALLS.index()].name,
            "syscalls"
        );
        assert_eq!(
            OCI_SYSCALL.fields[oci_syscall::ERRNO_RET.index()].name,
            "errnoRet"
        );
        assert_eq!(OCI_ARG.fields[oci_arg::VALUE_TWO.index()].name, "valueTwo");
        assert_eq!(
            TPL_SECCOMP.fields[tpl_seccomp::ARCH_MAP.index()].name,
            "archMap"
        );
        assert_eq!(
            TPL_SYSCALL.fields[tpl_syscall::EXCLUDES.index()].name,
            "excludes"
        );
        assert_eq!(
            TPL_FILTER.fields[tpl_filter::MIN_KERNEL.index()].name,
            "minKernel"
        );
        assert_eq!(
            TPL_ARCH.fields[tpl_arch::SUB_ARCHITECTURES.index()].name,
            "subArchitectures"
        );
    }

    /// Every field set to a value of its own, so a view reading one field
    /// through another's handle shows up as a wrong value.
    #[test]
    fn the_oci_view_reads_every_field() {
        let src = br#"{
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 38,
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
            "flags": ["SECCOMP_FILTER_FLAG_LOG"],
            "listenerPath": "/run/agent.sock",
            "listenerMetadata": "meta",
            "syscalls": [
                {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
                 "args": [{"index": 1, "value": 2, "valueTwo": 3, "op": "SCMP_CMP_MASKED_EQ"}]}
            ]
        }"#;
        let mut node = crate::json::parse(src).unwrap();
        let decoded = crate::decode::decode(&mut node, &OCI_SECCOMP);
        assert!(decoded.type_error.is_none());
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Seccomp::from_oci(decoded.root),
            Seccomp {
                default_action: "SCMP_ACT_ERRNO".into(),
                default_errno_ret: Some(38),
                architectures: strings(&["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]),
                flags: strings(&["SECCOMP_FILTER_FLAG_LOG"]),
                listener_path: "/run/agent.sock".into(),
                listener_metadata: "meta".into(),
                syscalls: vec![
                    SyscallRule {
                        names: strings(&["read", "write"]),
                        action: "SCMP_ACT_ALLOW".into(),
                        errno_ret: None,
                        args: vec![],
                        pointer: "/syscalls/0".into(),
                    },
                    SyscallRule {
                        names: strings(&["ptrace"]),
                        action: "SCMP_ACT_ERRNO".into(),
                        errno_ret: Some(1),
                        args: vec![ArgCond {
                            index: 1,
                            value: 2,
                            value_two: 3,
                            op: "SCMP_CMP_MASKED_EQ".into(),
                            pointer: "/syscalls/1/args/0".into(),
                        }],
                        pointer: "/syscalls/1".into(),
                    },
                ],
            }
        );
    }
}
