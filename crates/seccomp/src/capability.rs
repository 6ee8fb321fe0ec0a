//! Linux capabilities as numbers and names, and the bounding sets runtimes
//! give a container by default: what runc init and crun drop with one
//! `prctl(PR_CAPBSET_DROP, cap)` each, after the filter is loaded when
//! `noNewPrivileges` is false.

use std::fmt;

/// The capabilities by number (include/uapi/linux/capability.h).
const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// `/proc/sys/kernel/cap_last_cap` on every kernel since 5.9
/// (CAP_CHECKPOINT_RESTORE), so on every kernel nodeproof supports. runc's
/// capability library and crun loop from 0 to it.
pub const LAST_CAP: u8 = 40;

/// One capability, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Capability(pub u8);

impl Capability {
    /// `CAP_CHOWN`, or the number for one this table does not name.
    pub fn name(self) -> Option<&'static str> {
        NAMES.get(usize::from(self.0)).copied()
    }

    /// From `CAP_X` or `X` (the Kubernetes spelling), any case.
    pub fn from_name(name: &str) -> Option<Capability> {
        let upper = name.to_ascii_uppercase();
        let full = if upper.starts_with("CAP_") {
            upper
        } else {
            format!("CAP_{upper}")
        };
        NAMES
            .iter()
            .position(|n| *n == full)
            .map(|i| Capability(i as u8))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "capability {}", self.0),
        }
    }
}

/// A set of capabilities (bit n = capability n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapabilitySet(u64);

impl CapabilitySet {
    /// containerd's default (pkg/oci/spec.go `defaultUnixCaps`, which the CRI
    /// plugin starts every container from): the bounding set of a pod's
    /// container that neither adds nor drops capabilities.
    pub const CONTAINERD_DEFAULT: CapabilitySet = CapabilitySet::of(&[
        0,  // CAP_CHOWN
        1,  // CAP_DAC_OVERRIDE
        4,  // CAP_FSETID
        3,  // CAP_FOWNER
        27, // CAP_MKNOD
        13, // CAP_NET_RAW
        6,  // CAP_SETGID
        7,  // CAP_SETUID
        31, // CAP_SETFCAP
        8,  // CAP_SETPCAP
        10, // CAP_NET_BIND_SERVICE
        18, // CAP_SYS_CHROOT
        5,  // CAP_KILL
        29, // CAP_AUDIT_WRITE
    ]);

    /// CRI-O's default (crio.conf `default_capabilities`, the same list as
    /// [`crate::template::CRIO_DEFAULT_CAPS`]).
    pub const CRIO_DEFAULT: CapabilitySet = CapabilitySet::of(&[
        0,  // CAP_CHOWN
        1,  // CAP_DAC_OVERRIDE
        4,  // CAP_FSETID
        3,  // CAP_FOWNER
        6,  // CAP_SETGID
        7,  // CAP_SETUID
        8,  // CAP_SETPCAP
        10, // CAP_NET_BIND_SERVICE
        5,  // CAP_KILL
    ]);

    /// What `runc spec` and `crun spec` write (libcontainer/specconv
    /// `Example`, crun's `spec.c`): the bounding set of a bare OCI bundle.
    pub const OCI_SPEC_DEFAULT: CapabilitySet = CapabilitySet::of(&[
        29, // CAP_AUDIT_WRITE
        5,  // CAP_KILL
        10, // CAP_NET_BIND_SERVICE
    ]);

    pub const fn of(caps: &[u8]) -> CapabilitySet {
        let mut bits = 0u64;
        let mut i = 0;
        while i < caps.len() {
            bits |= 1 << caps[i];
            i += 1;
        }
        CapabilitySet(bits)
    }

    /// Every capability up to [`LAST_CAP`]: a privileged container's set.
    pub const ALL: CapabilitySet = CapabilitySet((1u64 << (LAST_CAP + 1)) - 1);

    /// A container's bounding set as the CRI runtime builds it from the
    /// pod's `securityContext`: privileged gets every capability; otherwise
    /// `default`, then `add: [ALL]`, then `drop: [ALL]`, then each other
    /// added capability, then each other dropped one (containerd's
    /// pkg/cri/opts `WithCapabilities`; CRI-O's `setupCapabilities` keeps
    /// the same order). Kubernetes names capabilities without the `CAP_`
    /// prefix, matched without regard to case; the runtime prefixes
    /// `CAP_`, so a name given with it, or one no kernel has, names
    /// nothing and changes nothing (runc ignores what it does not know).
    pub fn for_container(
        default: CapabilitySet,
        add: &[String],
        drop: &[String],
        privileged: bool,
    ) -> CapabilitySet {
        if privileged {
            return CapabilitySet::ALL;
        }
        let all = |names: &[String]| names.iter().any(|n| n.eq_ignore_ascii_case("ALL"));
        let named = |names: &[String]| -> Vec<Capability> {
            names
                .iter()
                .filter(|n| !n.eq_ignore_ascii_case("ALL"))
                .filter_map(|n| {
                    let full = format!("CAP_{}", n.to_ascii_uppercase());
                    NAMES
                        .iter()
                        .position(|k| *k == full)
                        .map(|i| Capability(i as u8))
                })
                .collect()
        };
        let mut set = default;
        if all(add) {
            set = CapabilitySet::ALL;
        }
        if all(drop) {
            set = CapabilitySet::of(&[]);
        }
        for c in named(add) {
            set = set.with(c);
        }
        for c in named(drop) {
            set = set.without(c);
        }
        set
    }

    pub fn contains(self, cap: Capability) -> bool {
        cap.0 < 64 && self.0 & (1 << cap.0) != 0
    }

    pub fn with(self, cap: Capability) -> CapabilitySet {
        CapabilitySet(self.0 | (1 << cap.0))
    }

    pub fn without(self, cap: Capability) -> CapabilitySet {
        CapabilitySet(self.0 & !(1 << cap.0))
    }

    /// The capabilities the runtime drops from the bounding set, in the
    /// order it drops them: every one up to [`LAST_CAP`] that the set lacks.
    pub fn dropped(self) -> impl Iterator<Item = Capability> {
        (0..=LAST_CAP)
            .map(Capability)
            .filter(move |&c| !self.contains(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_both_spellings_parse() {
        for n in 0..=LAST_CAP {
            let c = Capability(n);
            assert_eq!(Capability::from_name(c.name().unwrap()), Some(c));
        }
        assert_eq!(Capability::from_name("sys_admin"), Some(Capability(21)));
        assert_eq!(Capability::from_name("CAP_NOPE"), None);
        assert_eq!(Capability(63).to_string(), "capability 63");
    }

    #[test]
    fn a_containers_set_follows_the_cri_runtimes_order() {
        let caps = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let d = CapabilitySet::CONTAINERD_DEFAULT;
        let sys_admin = Capability(21);
        let chown = Capability(0);
        assert_eq!(CapabilitySet::for_container(d, &[], &[], false), d);
        assert_eq!(
            CapabilitySet::for_container(d, &[], &[], true),
            CapabilitySet::ALL
        );
        assert_eq!(CapabilitySet::ALL.dropped().count(), 0);
        let added = CapabilitySet::for_container(d, &caps(&["sys_admin"]), &[], false);
        assert!(added.contains(sys_admin));
        // drop ALL, then add: only what is added.
        let only =
            CapabilitySet::for_container(d, &caps(&["NET_BIND_SERVICE"]), &caps(&["all"]), false);
        assert_eq!(only, CapabilitySet::of(&[10]));
        // add ALL, then drop one.
        let but = CapabilitySet::for_container(d, &caps(&["ALL"]), &caps(&["CHOWN"]), false);
        assert_eq!(but, CapabilitySet::ALL.without(chown));
        // The CAP_ prefix or an unknown name names nothing: the runtime
        // makes CAP_CAP_SYS_ADMIN of it, which runc ignores.
        assert_eq!(
            CapabilitySet::for_container(d, &caps(&["CAP_SYS_ADMIN", "NOPE"]), &[], false),
            d
        );
    }

    #[test]
    fn crio_default_is_the_template_list() {
        let named = crate::template::CRIO_DEFAULT_CAPS
            .iter()
            .map(|n| Capability::from_name(n).expect(n))
            .fold(CapabilitySet::of(&[]), CapabilitySet::with);
        assert_eq!(named, CapabilitySet::CRIO_DEFAULT);
    }

    #[test]
    fn dropped_is_every_capability_the_set_lacks_in_ascending_order() {
        let dropped: Vec<u8> = CapabilitySet::OCI_SPEC_DEFAULT
            .dropped()
            .map(|c| c.0)
            .collect();
        assert_eq!(dropped.len(), 41 - 3);
        assert_eq!(&dropped[..6], &[0, 1, 2, 3, 4, 6]);
        assert!(!dropped.contains(&29));
        let containerd: Vec<u8> = CapabilitySet::CONTAINERD_DEFAULT
            .dropped()
            .map(|c| c.0)
            .collect();
        assert_eq!(containerd.len(), 41 - 14);
        assert_eq!(
            containerd[0], 2,
            "CAP_DAC_READ_SEARCH is the first containerd drops"
        );
        let added = CapabilitySet::CONTAINERD_DEFAULT.with(Capability(2));
        assert_eq!(added.dropped().next(), Some(Capability(9)));
        assert!(added.without(Capability(2)).dropped().any(|c| c.0 == 2));
    }
}
