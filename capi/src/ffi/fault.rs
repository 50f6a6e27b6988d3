//! Copies into and out of the application's memory that turn a fault into an error instead of
//! a signal: the way the kernel's `copy_from_user` does it (an exception table entry for the
//! one instruction that may fault).
//!
//! A registered buffer the application unmaps (or `mprotect`s) after `ibv_reg_mr` would
//! otherwise kill the process with SIGSEGV in the progress thread the first time a peer's
//! WRITE lands in it. On x86-64 every such copy is one `rep movsb` at a known
//! address ([`guarded_copy`]); a SIGSEGV/SIGBUS handler, installed when the first region over
//! application memory is made ([`install`]), moves a fault at exactly that instruction to a
//! fix-up that returns the bytes not copied, and passes every other fault on to the handler
//! that was there before (or the default action), so the application's own faults behave as
//! they did. The fast path costs no system call: a `rep movsb`, no slower than the `memcpy` it
//! replaces for packet-sized copies. On other architectures the copies go through
//! `process_vm_readv`/`process_vm_writev` on the process itself, which return `EFAULT` instead
//! of faulting (≈ 1 µs each).
//!
//! If the application installs a SIGSEGV handler of its own after the library's, faults in
//! these copies reach that handler first; the library installs its own again (chaining to the
//! application's) the next time a region is registered. docs/capi.md, "Memory unmapped after
//! registration".

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.rnic_guarded_copy,\"ax\",@progbits",
    ".p2align 4",
    ".globl rnic_guarded_copy",
    ".hidden rnic_guarded_copy",
    ".type rnic_guarded_copy,@function",
    // rdi = destination, rsi = source, rdx = length; returns the bytes not copied (rax).
    "rnic_guarded_copy:",
    "mov rcx, rdx",
    ".globl rnic_guarded_copy_insn",
    ".hidden rnic_guarded_copy_insn",
    "rnic_guarded_copy_insn:",
    // The one instruction that may fault: on a fault rcx holds the bytes left.
    "rep movsb",
    "xor eax, eax",
    "ret",
    ".globl rnic_guarded_copy_fixup",
    ".hidden rnic_guarded_copy_fixup",
    "rnic_guarded_copy_fixup:",
    "mov rax, rcx",
    "ret",
    ".size rnic_guarded_copy, .-rnic_guarded_copy",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn rnic_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
    fn rnic_guarded_copy_insn();
    fn rnic_guarded_copy_fixup();
}

/// The signals a bad memory access raises.
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// The action each of [`SIGNALS`] had before [`install`] (leaked, replaced only by a later
/// [`install`] that found another handler in place).
static PREVIOUS: [AtomicPtr<libc::sigaction>; 2] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

/// Installs the fault handler for SIGSEGV and SIGBUS unless it is the current one (the first
/// time, or after the application replaced it: the application's then becomes the one it
/// chains to). Cheap enough for every registration: two `sigaction` queries.
pub fn install() {
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK.lock();
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: all-zero is a valid `struct sigaction` (no handler, empty mask).
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: queries the action only (`act` NULL); `current` is writable.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut current) } != 0 {
            continue;
        }
        if current.sa_sigaction == on_fault as *const () as usize {
            continue;
        }
        PREVIOUS[i].store(Box::into_raw(Box::new(current)), Ordering::Release);
        // SAFETY: as above.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_fault as *const () as usize;
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a field of `ours`; emptying it cannot fail.
        unsafe { libc::sigemptyset(&mut ours.sa_mask) };
        // SAFETY: `on_fault` has the SA_SIGINFO signature and is async-signal-safe (it reads
        // and writes the signal's context and atomics, or calls the previous handler).
        unsafe { libc::sigaction(sig, &ours, std::ptr::null_mut()) };
    }
}

/// The handler: a fault at the guarded copy instruction resumes at its fix-up; anything else
/// goes to the previous action.
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    #[cfg(target_arch = "x86_64")]
    {
        let uc = ctx.cast::<libc::ucontext_t>();
        if !uc.is_null() {
            // SAFETY: for an SA_SIGINFO handler the kernel passes the interrupted context as
            // the third argument; `uc` is non-NULL and writable for the handler's duration.
            let rip = unsafe { &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] };
            if *rip as usize == rnic_guarded_copy_insn as *const () as usize {
                *rip = rnic_guarded_copy_fixup as *const () as usize as i64;
                return;
            }
        }
    }
    chain(sig, info, ctx);
}

/// Runs the action `sig` had before [`install`]: its handler, or the default (the action is
/// restored, and the signal raised again when it did not come from a fault, which would
/// simply recur when the handler returns).
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let i = usize::from(sig == libc::SIGBUS);
    let prev = PREVIOUS[i].load(Ordering::Acquire);
    // SAFETY: a leaked `Box<sigaction>`, never freed, or NULL.
    let prev = unsafe { prev.as_ref() };
    let handler = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: all-zero is SIG_DFL with an empty mask.
        let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: restores the default action; async-signal-safe.
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        // SAFETY: `info` is the kernel's siginfo for this signal.
        let from_fault = !info.is_null() && unsafe { (*info).si_code } > 0;
        if !from_fault {
            // SAFETY: raise is async-signal-safe.
            unsafe { libc::raise(sig) };
        }
        return;
    }
    let flags = prev.map_or(0, |p| p.sa_flags);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous action was installed as an SA_SIGINFO handler with this
        // signature; it gets the arguments the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain `void (*)(int)` handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// Copies `len` bytes of the application's memory at `src` into `dst` (the library's own);
/// false if the application's memory could not be read (some bytes may have been copied).
/// [`install`] must have run, or a fault is the signal it always was.
///
/// # Safety
/// `dst` is writable for `len` bytes and does not overlap `src`; `src` may be unmapped or
/// unreadable (that is the point), but if mapped it is the application's registered memory.
pub unsafe fn read_app(dst: *mut u8, src: *const u8, len: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe { copy(dst, src, len, false) }
}

/// Copies `len` bytes from `src` (the library's own) into the application's memory at `dst`;
/// false if that memory could not be written (some bytes may have been).
///
/// # Safety
/// `src` is readable for `len` bytes and does not overlap `dst`; `dst` may be unmapped or
/// read-only, but if writable it is the application's registered memory.
pub unsafe fn write_app(dst: *mut u8, src: *const u8, len: usize) -> bool {
    // SAFETY: the caller's contract.
    unsafe { copy(dst, src, len, true) }
}

/// The copy of [`read_app`] (`to_app` false) and [`write_app`].
///
/// # Safety
/// Their contracts.
unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, to_app: bool) -> bool {
    if len == 0 {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let _ = to_app;
        // SAFETY: the caller's contract; a fault at the copy instruction returns non-zero.
        unsafe { rnic_guarded_copy(dst, src, len) == 0 }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let ours = |p: *const u8| libc::iovec {
            iov_base: p as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: both iovecs describe `len` bytes; the kernel checks the application's side
        // and returns EFAULT rather than faulting.
        let n = unsafe {
            if to_app {
                libc::process_vm_writev(libc::getpid(), &ours(src), 1, &ours(dst), 1, 0)
            } else {
                libc::process_vm_readv(libc::getpid(), &ours(dst), 1, &ours(src), 1, 0)
            }
        };
        n == len as isize
    }
}

/// Whether every page of `[addr, addr + len)` can be read now: one guarded byte per page.
pub fn readable(addr: usize, len: usize) -> bool {
    const PAGE: usize = 4096;
    if len == 0 {
        return true;
    }
    let Some(last) = addr.checked_add(len - 1) else {
        return false;
    };
    let mut byte = 0u8;
    let mut at = addr;
    loop {
        // SAFETY: one byte into a local; a fault returns false instead.
        if !unsafe { read_app(&mut byte, at as *const u8, 1) } {
            return false;
        }
        let next = (at & !(PAGE - 1)).saturating_add(PAGE);
        if next > last {
            return true;
        }
        at = next;
    }
}
