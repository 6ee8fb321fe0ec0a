//! The profile as the runtime holds it after decoding: the OCI runtime-spec
//! `LinuxSeccomp` struct (what containerd hands to runc), and the Docker /
//! containers-common template struct that CRI-O and Docker read.

use crate::decode::{DObj, Field, Schema, Ty};

// ---- OCI runtime-spec (github.com/opencontainers/runtime-spec/specs-go) ----

pub static OCI_ARG: Schema = Schema {
    go_name: "LinuxSeccompArg",
    go_type: "specs.LinuxSeccompArg",
    fields: &[
        Field {
            name: "index",
            ty: Ty::Uint,
            go_type: "uint",
        },
        Field {
            name: "value",
            ty: Ty::Uint,
            go_type: "uint64",
        },
        Field {
            name: "valueTwo",
            ty: Ty::Uint,
            go_type: "uint64",
        },
        Field {
            name: "op",
            ty: Ty::Str,
            go_type: "specs.LinuxSeccompOperator",
        },
    ],
};

pub static OCI_SYSCALL: Schema = Schema {
    go_name: "LinuxSyscall",
    go_type: "specs.LinuxSyscall",
    fields: &[
        Field {
            name: "names",
            ty: Ty::StrList,
            go_type: "[]string",
        },
        Field {
            name: "action",
            ty: Ty::Str,
            go_type: "specs.LinuxSeccompAction",
        },
        Field {
            name: "errnoRet",
            ty: Ty::OptUint,
            go_type: "uint",
        },
        Field {
            name: "args",
            ty: Ty::ObjList(&OCI_ARG),
            go_type: "[]specs.LinuxSeccompArg",
        },
    ],
};

pub static OCI_SECCOMP: Schema = Schema {
    go_name: "LinuxSeccomp",
    go_type: "specs.LinuxSeccomp",
    fields: &[
        Field {
            name: "defaultAction",
            ty: Ty::Str,
            go_type: "specs.LinuxSeccompAction",
        },
        Field {
            name: "defaultErrnoRet",
            ty: Ty::OptUint,
            go_type: "uint",
        },
        Field {
            name: "architectures",
            ty: Ty::StrList,
            go_type: "[]specs.Arch",
        },
        Field {
            name: "flags",
            ty: Ty::StrList,
            go_type: "[]specs.LinuxSeccompFlag",
        },
        Field {
            name: "listenerPath",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "listenerMetadata",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "syscalls",
            ty: Ty::ObjList(&OCI_SYSCALL),
            go_type: "[]specs.LinuxSyscall",
        },
    ],
};

// ---- containers/common pkg/seccomp (the template CRI-O and Docker read) ----

pub static TPL_FILTER: Schema = Schema {
    go_name: "Filter",
    go_type: "seccomp.Filter",
    fields: &[
        Field {
            name: "caps",
            ty: Ty::StrList,
            go_type: "[]string",
        },
        Field {
            name: "arches",
            ty: Ty::StrList,
            go_type: "[]string",
        },
        Field {
            name: "minKernel",
            ty: Ty::Str,
            go_type: "string",
        },
    ],
};

pub static TPL_ARCH: Schema = Schema {
    go_name: "Architecture",
    go_type: "seccomp.Architecture",
    fields: &[
        Field {
            name: "architecture",
            ty: Ty::Str,
            go_type: "seccomp.Arch",
        },
        Field {
            name: "subArchitectures",
            ty: Ty::StrList,
            go_type: "[]seccomp.Arch",
        },
    ],
};

pub static TPL_SYSCALL: Schema = Schema {
    go_name: "Syscall",
    go_type: "seccomp.Syscall",
    fields: &[
        Field {
            name: "name",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "names",
            ty: Ty::StrList,
            go_type: "[]string",
        },
        Field {
            name: "action",
            ty: Ty::Str,
            go_type: "seccomp.Action",
        },
        Field {
            name: "args",
            ty: Ty::ObjList(&OCI_ARG),
            go_type: "[]*seccomp.Arg",
        },
        Field {
            name: "comment",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "includes",
            ty: Ty::Obj(&TPL_FILTER),
            go_type: "seccomp.Filter",
        },
        Field {
            name: "excludes",
            ty: Ty::Obj(&TPL_FILTER),
            go_type: "seccomp.Filter",
        },
        Field {
            name: "errnoRet",
            ty: Ty::OptUint,
            go_type: "uint",
        },
        Field {
            name: "errno",
            ty: Ty::Str,
            go_type: "string",
        },
    ],
};

pub static TPL_SECCOMP: Schema = Schema {
    go_name: "Seccomp",
    go_type: "seccomp.Seccomp",
    fields: &[
        Field {
            name: "defaultAction",
            ty: Ty::Str,
            go_type: "seccomp.Action",
        },
        Field {
            name: "defaultErrnoRet",
            ty: Ty::OptUint,
            go_type: "uint",
        },
        Field {
            name: "defaultErrno",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "listenerPath",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "listenerMetadata",
            ty: Ty::Str,
            go_type: "string",
        },
        Field {
            name: "architectures",
            ty: Ty::StrList,
            go_type: "[]seccomp.Arch",
        },
        Field {
            name: "archMap",
            ty: Ty::ObjList(&TPL_ARCH),
            go_type: "[]seccomp.Architecture",
        },
        Field {
            name: "syscalls",
            ty: Ty::ObjList(&TPL_SYSCALL),
            go_type: "[]*seccomp.Syscall",
        },
        Field {
            name: "flags",
            ty: Ty::StrList,
            go_type: "[]string",
        },
    ],
};

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
            index: o.uint(0),
            value: o.uint(1),
            value_two: o.uint(2),
            op: o.take_str(3),
            pointer: o.pointer,
        }
    }
}

impl Seccomp {
    /// View a value decoded with [`OCI_SECCOMP`] (its strings move here).
    pub fn from_oci(mut root: DObj) -> Seccomp {
        Seccomp {
            default_action: root.take_str(0),
            default_errno_ret: root.opt_uint(1),
            architectures: root.take_str_list(2),
            flags: root.take_str_list(3),
            listener_path: root.take_str(4),
            listener_metadata: root.take_str(5),
            syscalls: root
                .take_obj_list(6)
                .into_iter()
                .map(|mut s| SyscallRule {
                    names: s.take_str_list(0),
                    action: s.take_str(1),
                    errno_ret: s.opt_uint(2),
                    args: s
                        .take_obj_list(3)
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
    use crate::decode::{Ty, TEMPLATE_KEYS};
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
}
