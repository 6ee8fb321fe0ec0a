//! Classic BPF as seccomp uses it: the instruction type, the kernel's
//! length limit, the opcodes, and an interpreter.
//!
//! It accepts what the kernel's `seccomp_check_filter` accepts (no packet
//! loads other than aligned 32-bit absolute loads from `seccomp_data`, no
//! `BPF_MOD`) and evaluates it with the kernel's runtime semantics.
//! Termination is guaranteed: every jump moves the pc strictly forward.

/// The kernel's limit on the length of a classic BPF program (`BPF_MAXINSNS`).
pub const BPF_MAXINSNS: usize = 4096;

/// One classic BPF instruction, laid out like the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl SockFilter {
    pub const SIZE: usize = 8;

    /// Decode one instruction as `seccomp_export_bpf` writes it (host byte order).
    pub fn from_bytes(b: [u8; 8]) -> SockFilter {
        SockFilter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// The kernel's `struct seccomp_data` (64 bytes), the filter's only input.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

impl SeccompData {
    pub const SIZE: u32 = 64;

    pub fn new(nr: i32, arch: u32, args: [u64; 6]) -> SeccompData {
        SeccompData {
            nr,
            arch,
            instruction_pointer: 0,
            args,
        }
    }

    /// The 32-bit word at byte offset `off` (aligned, in bounds), host byte
    /// order like the kernel's `BPF_LD|BPF_W|BPF_ABS` on seccomp data.
    fn word(&self, off: u32) -> Option<u32> {
        if !off.is_multiple_of(4) || off >= Self::SIZE {
            return None;
        }
        // The field holding the word, read without building the 64 bytes:
        // `profile diff` runs programs millions of times.
        let (field, at) = match off {
            0 => return Some(self.nr as u32),
            4 => return Some(self.arch),
            8 | 12 => (self.instruction_pointer, off - 8),
            _ => (self.args[((off - 16) / 8) as usize], (off - 16) % 8),
        };
        let b = field.to_ne_bytes();
        let o = at as usize;
        Some(u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BpfError {
    #[error("program is empty")]
    Empty,
    #[error("program has {len} instructions, more than the kernel's {max}", max = BPF_MAXINSNS)]
    TooLong { len: usize },
    #[error("instruction {pc}: opcode {code:#06x} is not allowed in seccomp filters")]
    BadOpcode { pc: usize, code: u16 },
    #[error(
        "instruction {pc}: load from seccomp_data offset {offset} is misaligned or out of bounds"
    )]
    BadLoad { pc: usize, offset: u32 },
    #[error("instruction {pc}: scratch memory slot {slot} does not exist (0-15)")]
    BadMemSlot { pc: usize, slot: u32 },
    #[error("instruction {pc}: jump lands outside the program")]
    JumpOutOfRange { pc: usize },
    #[error("instruction {pc}: division by constant zero")]
    DivByZeroConst { pc: usize },
    #[error("instruction {pc}: shift by {shift} (must be below 32)")]
    BadShift { pc: usize, shift: u32 },
    #[error("execution ran past the last instruction (pc {pc}) without returning")]
    FellOffEnd { pc: usize },
    #[error("instruction {pc}: scratch memory slot {slot} may be read before it is written")]
    UninitializedMem { pc: usize, slot: u32 },
    #[error("the last instruction (pc {pc}) is not a return")]
    LastNotReturn { pc: usize },
}

// Classic BPF opcode fields (linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_LDX: u16 = 0x01;
const BPF_ST: u16 = 0x02;
const BPF_STX: u16 = 0x03;
const BPF_ALU: u16 = 0x04;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_MISC: u16 = 0x07;

const BPF_W: u16 = 0x00;
const BPF_IMM: u16 = 0x00;
const BPF_ABS: u16 = 0x20;
const BPF_MEM: u16 = 0x60;
const BPF_LEN: u16 = 0x80;

const BPF_K: u16 = 0x00;
const BPF_X: u16 = 0x08;
const BPF_A: u16 = 0x10;

const BPF_ADD: u16 = 0x00;
const BPF_SUB: u16 = 0x10;
const BPF_MUL: u16 = 0x20;
const BPF_DIV: u16 = 0x30;
const BPF_OR: u16 = 0x40;
const BPF_AND: u16 = 0x50;
const BPF_LSH: u16 = 0x60;
const BPF_RSH: u16 = 0x70;
const BPF_NEG: u16 = 0x80;
const BPF_XOR: u16 = 0xa0;

const BPF_JA: u16 = 0x00;
const BPF_JEQ: u16 = 0x10;
const BPF_JGT: u16 = 0x20;
const BPF_JGE: u16 = 0x30;
const BPF_JSET: u16 = 0x40;

const BPF_TAX: u16 = 0x00;
const BPF_TXA: u16 = 0x80;

const BPF_MEMWORDS: u32 = 16;

/// Opcode constructors, handy for hand-written programs and tests.
pub mod op {
    pub const LD_W_ABS: u16 = 0x20;
    pub const LD_IMM: u16 = 0x00;
    pub const LDX_IMM: u16 = 0x01;
    pub const LD_MEM: u16 = 0x60;
    pub const LDX_MEM: u16 = 0x61;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU_ADD_K: u16 = 0x04;
    pub const ALU_DIV_K: u16 = 0x34;
    pub const ALU_DIV_X: u16 = 0x3c;
    pub const ALU_AND_K: u16 = 0x54;
    pub const ALU_LSH_K: u16 = 0x64;
    pub const ALU_MOD_K: u16 = 0x94;
    pub const JA: u16 = 0x05;
    pub const JEQ_K: u16 = 0x15;
    pub const JGT_K: u16 = 0x25;
    pub const JGE_K: u16 = 0x35;
    pub const JSET_K: u16 = 0x45;
    pub const JEQ_X: u16 = 0x1d;
    pub const RET_K: u16 = 0x06;
    pub const RET_A: u16 = 0x16;
    pub const TAX: u16 = 0x07;
    pub const TXA: u16 = 0x87;
}

/// Run `program` on `data` and return the filter's 32-bit `SECCOMP_RET_*` value.
pub fn run(program: &[SockFilter], data: &SeccompData) -> Result<u32, BpfError> {
    if program.is_empty() {
        return Err(BpfError::Empty);
    }
    if program.len() > BPF_MAXINSNS {
        return Err(BpfError::TooLong { len: program.len() });
    }
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; BPF_MEMWORDS as usize];
    let mut pc: usize = 0;
    // pc strictly increases every step, so this loop runs at most len times.
    while let Some(ins) = program.get(pc) {
        let code = ins.code;
        let k = ins.k;
        let bad = BpfError::BadOpcode { pc, code };
        // The ALU and jump arms below read only the class, operation and
        // source bits; an opcode with bits above them is none the kernel knows.
        if code > 0xff {
            return Err(bad);
        }
        let next = pc + 1;
        let slot = |s: u32| {
            if s < BPF_MEMWORDS {
                Ok(s as usize)
            } else {
                Err(BpfError::BadMemSlot { pc, slot: s })
            }
        };
        match code & 0x07 {
            BPF_LD => match code & !0x07 {
                m if m == BPF_W | BPF_ABS => {
                    a = data.word(k).ok_or(BpfError::BadLoad { pc, offset: k })?;
                }
                m if m == BPF_W | BPF_IMM => a = k,
                m if m == BPF_W | BPF_MEM => a = mem[slot(k)?],
                // The kernel rewrites LEN to an immediate sizeof(seccomp_data).
                m if m == BPF_W | BPF_LEN => a = SeccompData::SIZE,
                _ => return Err(bad),
            },
            BPF_LDX => match code & !0x07 {
                m if m == BPF_W | BPF_IMM => x = k,
                m if m == BPF_W | BPF_MEM => x = mem[slot(k)?],
                m if m == BPF_W | BPF_LEN => x = SeccompData::SIZE,
                _ => return Err(bad),
            },
            BPF_ST if code == BPF_ST => mem[slot(k)?] = a,
            BPF_STX if code == BPF_STX => mem[slot(k)?] = x,
            BPF_ALU => {
                let src = if code & BPF_X != 0 { x } else { k };
                match code & 0xf0 {
                    BPF_ADD => a = a.wrapping_add(src),
                    BPF_SUB => a = a.wrapping_sub(src),
                    BPF_MUL => a = a.wrapping_mul(src),
                    BPF_DIV => {
                        if src == 0 {
                            if code & BPF_X == 0 {
                                return Err(BpfError::DivByZeroConst { pc });
                            }
                            // The kernel's cBPF conversion makes X == 0 return 0.
                            return Ok(0);
                        }
                        a /= src;
                    }
                    BPF_OR => a |= src,
                    BPF_AND => a &= src,
                    BPF_LSH | BPF_RSH => {
                        if code & BPF_X == 0 && k >= 32 {
                            return Err(BpfError::BadShift { pc, shift: k });
                        }
                        // Shifts by X use the low 5 bits, as the JITs do.
                        let s = src & 31;
                        a = if code & 0xf0 == BPF_LSH {
                            a << s
                        } else {
                            a >> s
                        };
                    }
                    BPF_NEG if code & BPF_X == 0 => a = a.wrapping_neg(),
                    BPF_XOR => a ^= src,
                    // BPF_MOD and anything else is rejected by seccomp.
                    _ => return Err(bad),
                }
            }
            BPF_JMP => {
                let target = |off: u32| {
                    next.checked_add(off as usize)
                        .filter(|&t| t < program.len())
                        .ok_or(BpfError::JumpOutOfRange { pc })
                };
                if code & 0xf0 == BPF_JA {
                    if code != BPF_JMP | BPF_JA {
                        return Err(bad);
                    }
                    pc = target(k)?;
                    continue;
                }
                let src = if code & BPF_X != 0 { x } else { k };
                let taken = match code & 0xf0 {
                    BPF_JEQ => a == src,
                    BPF_JGT => a > src,
                    BPF_JGE => a >= src,
                    BPF_JSET => a & src != 0,
                    _ => return Err(bad),
                };
                // Both branches must be valid targets, as the kernel checks.
                let jt = target(u32::from(ins.jt))?;
                let jf = target(u32::from(ins.jf))?;
                pc = if taken { jt } else { jf };
                continue;
            }
            BPF_RET => {
                return match code & 0x18 {
                    BPF_K => Ok(k),
                    BPF_A => Ok(a),
                    _ => Err(bad),
                };
            }
            BPF_MISC => match code & 0xf8 {
                BPF_TAX => x = a,
                BPF_TXA => a = x,
                _ => return Err(bad),
            },
            _ => return Err(bad),
        }
        pc = next;
    }
    Err(BpfError::FellOffEnd { pc })
}

/// Check `program` the way the kernel does when it is loaded
/// (`bpf_check_classic` + `seccomp_check_filter`), over every instruction
/// rather than only the path one input takes.
pub fn validate(program: &[SockFilter]) -> Result<(), BpfError> {
    let len = program.len();
    if len == 0 {
        return Err(BpfError::Empty);
    }
    if len > BPF_MAXINSNS {
        return Err(BpfError::TooLong { len });
    }
    for (pc, ins) in program.iter().enumerate() {
        let (code, k) = (ins.code, ins.k);
        let bad = BpfError::BadOpcode { pc, code };
        // The kernel looks each opcode up whole (`chk_code_allowed` in
        // net/core/filter.c indexes a table of the valid 8-bit codes;
        // `seccomp_check_filter` switches on exact codes): bits above the
        // class, operation and source fields make any instruction invalid.
        // The ALU and jump arms below match on those fields alone.
        if code > 0xff {
            return Err(bad);
        }
        let in_range = |off: u32| (off as usize) < len - pc - 1;
        match code {
            c if c == BPF_LD | BPF_W | BPF_ABS => {
                if !k.is_multiple_of(4) || k >= SeccompData::SIZE {
                    return Err(BpfError::BadLoad { pc, offset: k });
                }
            }
            c if c == BPF_LD | BPF_W | BPF_LEN || c == BPF_LDX | BPF_W | BPF_LEN => {}
            c if c == BPF_LD | BPF_IMM || c == BPF_LDX | BPF_IMM => {}
            c if c == BPF_LD | BPF_MEM || c == BPF_LDX | BPF_MEM || c == BPF_ST || c == BPF_STX => {
                if k >= BPF_MEMWORDS {
                    return Err(BpfError::BadMemSlot { pc, slot: k });
                }
            }
            c if c & 0x07 == BPF_ALU => match c & 0xf0 {
                BPF_ADD | BPF_SUB | BPF_MUL | BPF_OR | BPF_AND | BPF_XOR => {}
                BPF_DIV => {
                    if c & BPF_X == 0 && k == 0 {
                        return Err(BpfError::DivByZeroConst { pc });
                    }
                }
                BPF_LSH | BPF_RSH => {
                    if c & BPF_X == 0 && k >= 32 {
                        return Err(BpfError::BadShift { pc, shift: k });
                    }
                }
                BPF_NEG if c & BPF_X == 0 => {}
                _ => return Err(bad),
            },
            c if c == BPF_JMP | BPF_JA => {
                if !in_range(k) {
                    return Err(BpfError::JumpOutOfRange { pc });
                }
            }
            c if c & 0x07 == BPF_JMP => match c & 0xf0 {
                BPF_JEQ | BPF_JGT | BPF_JGE | BPF_JSET => {
                    if !in_range(u32::from(ins.jt)) || !in_range(u32::from(ins.jf)) {
                        return Err(BpfError::JumpOutOfRange { pc });
                    }
                }
                _ => return Err(bad),
            },
            c if c == BPF_RET | BPF_K || c == BPF_RET | BPF_A => {}
            c if c == BPF_MISC | BPF_TAX || c == BPF_MISC | BPF_TXA => {}
            _ => return Err(bad),
        }
    }
    let last = program[len - 1].code;
    if last != BPF_RET | BPF_K && last != BPF_RET | BPF_A {
        return Err(BpfError::LastNotReturn { pc: len - 1 });
    }
    check_load_and_stores(program)
}

/// The kernel's `check_load_and_stores`: a scratch slot must be written on
/// every path before it is read. Jumps only go forward, so one pass suffices.
fn check_load_and_stores(program: &[SockFilter]) -> Result<(), BpfError> {
    let mut masks = vec![u16::MAX; program.len()];
    let mut valid: u16 = 0;
    for (pc, ins) in program.iter().enumerate() {
        valid &= masks[pc];
        // Slots and targets were range-checked by `validate`.
        let bit = 1u16 << (ins.k & 15);
        match ins.code {
            c if c == BPF_ST || c == BPF_STX => valid |= bit,
            c if (c == BPF_LD | BPF_MEM || c == BPF_LDX | BPF_MEM) && valid & bit == 0 => {
                return Err(BpfError::UninitializedMem { pc, slot: ins.k });
            }
            c if c == BPF_JMP | BPF_JA => {
                masks[pc + 1 + ins.k as usize] &= valid;
                valid = u16::MAX;
            }
            c if c & 0x07 == BPF_JMP => {
                masks[pc + 1 + usize::from(ins.jt)] &= valid;
                masks[pc + 1 + usize::from(ins.jf)] &= valid;
                valid = u16::MAX;
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::op::*;
    use super::*;

    fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
        SockFilter { code, jt, jf, k }
    }

    fn data(nr: i32) -> SeccompData {
        SeccompData::new(nr, 0xc000_003e, [0; 6])
    }

    #[test]
    fn seccomp_data_is_kernel_sized() {
        assert_eq!(std::mem::size_of::<SeccompData>(), 64);
        assert_eq!(std::mem::size_of::<SockFilter>(), 8);
    }

    #[test]
    fn allowlist_by_nr() {
        let prog = [
            ins(LD_W_ABS, 0, 0, 0),
            ins(JEQ_K, 0, 1, 83),
            ins(RET_K, 0, 0, 0x0005_0001),
            ins(RET_K, 0, 0, 0x7fff_0000),
        ];
        assert_eq!(run(&prog, &data(83)), Ok(0x0005_0001));
        assert_eq!(run(&prog, &data(84)), Ok(0x7fff_0000));
    }

    #[test]
    fn loads_arch_and_arg_words() {
        let mut d = data(1);
        d.args[1] = 0x1122_3344_5566_7788;
        // A = high word of arg1 (little-endian hosts); return it.
        let hi = if cfg!(target_endian = "little") {
            28
        } else {
            24
        };
        assert_eq!(
            run(&[ins(LD_W_ABS, 0, 0, hi), ins(RET_A, 0, 0, 0)], &d),
            Ok(0x1122_3344)
        );
        assert_eq!(
            run(&[ins(LD_W_ABS, 0, 0, 4), ins(RET_A, 0, 0, 0)], &d),
            Ok(0xc000_003e)
        );
    }

    #[test]
    fn rejects_bad_loads() {
        let d = data(0);
        assert_eq!(
            run(&[ins(LD_W_ABS, 0, 0, 64), ins(RET_A, 0, 0, 0)], &d),
            Err(BpfError::BadLoad { pc: 0, offset: 64 })
        );
        assert_eq!(
            run(
                &[
                    ins(LD_IMM, 0, 0, 0),
                    ins(LD_W_ABS, 0, 0, 2),
                    ins(RET_A, 0, 0, 0)
                ],
                &d
            ),
            Err(BpfError::BadLoad { pc: 1, offset: 2 })
        );
        assert_eq!(
            run(&[ins(ST, 0, 0, 16), ins(RET_A, 0, 0, 0)], &d),
            Err(BpfError::BadMemSlot { pc: 0, slot: 16 })
        );
    }

    #[test]
    fn scratch_memory_and_registers() {
        let prog = [
            ins(LD_IMM, 0, 0, 7),
            ins(ST, 0, 0, 3),
            ins(LDX_IMM, 0, 0, 5),
            ins(STX, 0, 0, 4),
            ins(LD_MEM, 0, 0, 4),  // A = 5
            ins(LDX_MEM, 0, 0, 3), // X = 7
            ins(JEQ_X, 0, 2, 0),   // 5 != 7 → jump to TXA
            ins(RET_K, 0, 0, 1),
            ins(RET_K, 0, 0, 2),
            ins(TXA, 0, 0, 0), // A = 7
            ins(ALU_LSH_K, 0, 0, 4),
            ins(ALU_ADD_K, 0, 0, 1), // A = 113
            ins(TAX, 0, 0, 0),
            ins(RET_A, 0, 0, 0),
        ];
        assert_eq!(run(&prog, &data(0)), Ok(113));
    }

    #[test]
    fn jump_kinds() {
        let prog = |code, k| {
            [
                ins(LD_IMM, 0, 0, 0b1010),
                ins(code, 0, 1, k),
                ins(RET_K, 0, 0, 1),
                ins(RET_K, 0, 0, 0),
            ]
        };
        assert_eq!(run(&prog(JGT_K, 9), &data(0)), Ok(1));
        assert_eq!(run(&prog(JGT_K, 10), &data(0)), Ok(0));
        assert_eq!(run(&prog(JGE_K, 10), &data(0)), Ok(1));
        assert_eq!(run(&prog(JSET_K, 0b0100), &data(0)), Ok(0));
        assert_eq!(run(&prog(JSET_K, 0b0010), &data(0)), Ok(1));
        let ja = [ins(JA, 0, 0, 1), ins(RET_K, 0, 0, 1), ins(RET_K, 0, 0, 2)];
        assert_eq!(run(&ja, &data(0)), Ok(2));
    }

    #[test]
    fn division() {
        let by_x = |x| {
            [
                ins(LD_IMM, 0, 0, 100),
                ins(LDX_IMM, 0, 0, x),
                ins(ALU_DIV_X, 0, 0, 0),
                ins(RET_A, 0, 0, 0),
            ]
        };
        assert_eq!(run(&by_x(7), &data(0)), Ok(14));
        // Division by a zero X aborts the filter with 0 (SECCOMP_RET_KILL_THREAD).
        assert_eq!(run(&by_x(0), &data(0)), Ok(0));
        assert_eq!(
            run(&[ins(ALU_DIV_K, 0, 0, 0), ins(RET_A, 0, 0, 0)], &data(0)),
            Err(BpfError::DivByZeroConst { pc: 0 })
        );
    }

    #[test]
    fn rejects_what_seccomp_rejects() {
        assert_eq!(run(&[], &data(0)), Err(BpfError::Empty));
        assert_eq!(
            run(&[ins(ALU_MOD_K, 0, 0, 3), ins(RET_A, 0, 0, 0)], &data(0)),
            Err(BpfError::BadOpcode {
                pc: 0,
                code: ALU_MOD_K
            })
        );
        // BPF_LD|BPF_B|BPF_ABS: byte loads are not allowed.
        assert_eq!(
            run(&[ins(0x30, 0, 0, 0), ins(RET_A, 0, 0, 0)], &data(0)),
            Err(BpfError::BadOpcode { pc: 0, code: 0x30 })
        );
        assert_eq!(
            run(&[ins(ALU_LSH_K, 0, 0, 32), ins(RET_A, 0, 0, 0)], &data(0)),
            Err(BpfError::BadShift { pc: 0, shift: 32 })
        );
        let long = vec![ins(RET_K, 0, 0, 0); BPF_MAXINSNS + 1];
        assert_eq!(
            run(&long, &data(0)),
            Err(BpfError::TooLong {
                len: BPF_MAXINSNS + 1
            })
        );
    }

    #[test]
    fn jumps_out_of_range_and_falling_off() {
        assert_eq!(
            run(&[ins(JA, 0, 0, 1), ins(RET_K, 0, 0, 0)], &data(0)),
            Err(BpfError::JumpOutOfRange { pc: 0 })
        );
        // u32::MAX offset must not wrap around to an earlier instruction.
        assert_eq!(
            run(&[ins(JA, 0, 0, u32::MAX), ins(RET_K, 0, 0, 0)], &data(0)),
            Err(BpfError::JumpOutOfRange { pc: 0 })
        );
        // The untaken branch is checked too.
        assert_eq!(
            run(&[ins(JEQ_K, 0, 5, 0), ins(RET_K, 0, 0, 0)], &data(0)),
            Err(BpfError::JumpOutOfRange { pc: 0 })
        );
        assert_eq!(
            run(&[ins(LD_IMM, 0, 0, 0)], &data(0)),
            Err(BpfError::FellOffEnd { pc: 1 })
        );
    }

    #[test]
    fn validate_mirrors_kernel_checks() {
        let ok = [
            ins(LD_W_ABS, 0, 0, 0),
            ins(JEQ_K, 0, 1, 1),
            ins(RET_K, 0, 0, 0),
            ins(RET_A, 0, 0, 0),
        ];
        assert_eq!(validate(&ok), Ok(()));
        assert_eq!(
            validate(&[ins(RET_K, 0, 0, 0), ins(LD_IMM, 0, 0, 0)]),
            Err(BpfError::LastNotReturn { pc: 1 })
        );
        // Never executed, still rejected.
        assert_eq!(
            validate(&[
                ins(RET_K, 0, 0, 0),
                ins(ALU_MOD_K, 0, 0, 3),
                ins(RET_A, 0, 0, 0)
            ]),
            Err(BpfError::BadOpcode {
                pc: 1,
                code: ALU_MOD_K
            })
        );
        assert_eq!(
            validate(&[ins(LD_MEM, 0, 0, 2), ins(RET_A, 0, 0, 0)]),
            Err(BpfError::UninitializedMem { pc: 0, slot: 2 })
        );
        // Stored on one path only: the join point may read garbage.
        let one_path = [
            ins(JEQ_K, 0, 1, 0),
            ins(ST, 0, 0, 2),
            ins(LD_MEM, 0, 0, 2),
            ins(RET_A, 0, 0, 0),
        ];
        assert_eq!(
            validate(&one_path),
            Err(BpfError::UninitializedMem { pc: 2, slot: 2 })
        );
        let both = [
            ins(ST, 0, 0, 2),
            ins(JEQ_K, 0, 0, 0),
            ins(LD_MEM, 0, 0, 2),
            ins(RET_A, 0, 0, 0),
        ];
        assert_eq!(validate(&both), Ok(()));
        assert_eq!(
            validate(&[ins(JA, 0, 0, 1), ins(RET_K, 0, 0, 0)]),
            Err(BpfError::JumpOutOfRange { pc: 0 })
        );
    }

    /// Found by the `bpf_interpreter_vs_kernel` fuzz target: opcode 0x964
    /// (LSH K with bits 0x900 above the opcode fields) was accepted and run
    /// as a shift; the kernel refuses the program with EINVAL. Every ALU and
    /// jump opcode with such bits is refused, by the checker and the interpreter.
    #[test]
    fn opcodes_with_bits_above_the_fields_are_refused() {
        let found = [ins(0x0964, 0, 0, 4), ins(RET_K, 0, 0, 0x7fc0_0000)];
        assert_eq!(
            validate(&found),
            Err(BpfError::BadOpcode {
                pc: 0,
                code: 0x0964
            })
        );
        assert_eq!(
            run(&found, &data(0)),
            Err(BpfError::BadOpcode {
                pc: 0,
                code: 0x0964
            })
        );
        for code in [ALU_ADD_K, ALU_DIV_X, ALU_LSH_K, JEQ_K, JSET_K, JEQ_X, JA] {
            for high in [0x0100, 0x0800, 0x8000] {
                let p = [
                    ins(code | high, 0, 0, 1),
                    ins(RET_K, 0, 0, 0),
                    ins(RET_K, 0, 0, 0),
                ];
                assert_eq!(
                    validate(&p),
                    Err(BpfError::BadOpcode {
                        pc: 0,
                        code: code | high
                    }),
                    "{:#06x}",
                    code | high
                );
                assert!(run(&p, &data(0)).is_err(), "{:#06x}", code | high);
                // Without the high bits the same program is valid.
                assert_eq!(
                    validate(&[ins(code, 0, 0, 1), p[1], p[2]]),
                    Ok(()),
                    "{code:#06x}"
                );
            }
        }
    }
}
