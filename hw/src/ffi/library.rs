//! libibverbs, loaded at run time: `dlopen("libibverbs.so.1")` through `libloading` at the first
//! [`crate::HwDevice::open`], and the address of every function the backend calls, typed with
//! `verbs-abi`'s layouts. Nothing here exports a symbol: a process may hold this backend and
//! librnic's own `ibv_*` entry points side by side.
//!
//! The library stays loaded for the rest of the process, as a program linked against
//! libibverbs keeps it: its providers, and librnic when it stands in for it, start threads and
//! register thread-local destructors that must not outlive their code. A failed load is not
//! remembered: the next open tries again.
//!
//! The functions are found with `dlsym`, which returns each symbol's default version — the one
//! a C program compiled today against `<infiniband/verbs.h>` binds to (`ibv_create_qp@@IBVERBS_1.1`,
//! not the 1.0 compatibility one). What verbs.h implements inline is not in the list: the data
//! path (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) calls through `context->ops` as the header's inline functions do
//! (`post.rs`, `verbs.rs`, `srq.rs`); `ibv_query_port` and `ibv_reg_mr` are the exported
//! functions the header's wrappers call for what the backend asks (see [`Lib::ibv_query_port`]).

use crate::HwError;
use libc::{c_char, c_int, c_uint, c_void, size_t};
use libloading::Library;
use std::sync::OnceLock;
use verbs_abi::{
    ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_gid,
    ibv_mr, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr, ibv_srq, ibv_srq_attr,
    ibv_srq_init_attr,
};

/// The file name `dlopen` searches for (`LD_LIBRARY_PATH`, the cache, the default paths), the
/// soname of rdma-core's libibverbs.
pub(crate) const LIBRARY: &str = "libibverbs.so.1";

/// Declares [`Lib`]: one field per required function, typed as its prototype in verbs.h, and
/// the loader that resolves them all.
macro_rules! functions {
    ($(
        $(#[doc = $doc:literal])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;
    )+) => {
        /// The libibverbs functions the backend calls, resolved from the loaded library; the
        /// library itself, never unloaded.
        pub(crate) struct Lib {
            $(
                $(#[doc = $doc])*
                pub(super) $name: unsafe extern "C" fn($($arg: $ty),*) $(-> $ret)?,
            )+
            /// `int ibv_query_gid_type(struct ibv_context *, uint8_t port_num, unsigned int
            /// index, enum ibv_gid_type_sysfs *type)` (driver.h, `IBVERBS_PRIVATE_*`):
            /// `None` where the library has no such symbol (the caller falls back to sysfs).
            pub(super) ibv_query_gid_type:
                Option<unsafe extern "C" fn(*mut ibv_context, u8, c_uint, *mut c_uint) -> c_int>,
            /// Keeps the functions above mapped. Never dropped: [`Lib`] lives in a `static`.
            _library: Library,
        }

        impl Lib {
            /// Resolves every function of [`Lib`] in `library`; `None` names the first missing
            /// one.
            fn resolve(library: Library) -> Result<Lib, &'static str> {
                Ok(Lib {
                    $(
                        // SAFETY: the type is the function's prototype in verbs.h (the macro's
                        // input lists each one as the header declares it).
                        $name: unsafe { symbol(&library, stringify!($name)) }
                            .ok_or(stringify!($name))?,
                    )+
                    // SAFETY: the prototype of driver.h, as documented on the field.
                    ibv_query_gid_type: unsafe { symbol(&library, "ibv_query_gid_type") },
                    _library: library,
                })
            }
        }
    };
}

functions! {
    /// `struct ibv_device **ibv_get_device_list(int *num_devices)`.
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    /// `void ibv_free_device_list(struct ibv_device **list)`.
    fn ibv_free_device_list(list: *mut *mut ibv_device);
    /// `const char *ibv_get_device_name(struct ibv_device *device)`.
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    /// `struct ibv_context *ibv_open_device(struct ibv_device *device)`.
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    /// `int ibv_close_device(struct ibv_context *context)`.
    fn ibv_close_device(context: *mut ibv_context) -> c_int;
    /// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)`.
    fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    /// `int ibv_query_port(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *)`:
    /// the exported function verbs.h's inline `ibv_query_port` calls for a context that is not
    /// extended (after zeroing the whole `struct ibv_port_attr`); for an extended one the
    /// inline calls `verbs_context->query_port` instead. Both fill the same fields from the
    /// provider; the exported one copies the prefix the old layout has (`state` …
    /// `link_layer`, `flags`: everything the backend reads), leaving `port_cap_flags2` (and
    /// newer fields) as zeroed.
    fn ibv_query_port(context: *mut ibv_context, port_num: u8, attr: *mut ibv_port_attr) -> c_int;
    /// `int ibv_query_gid(struct ibv_context *, uint8_t port_num, int index, union ibv_gid *)`.
    fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid)
        -> c_int;
    /// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`.
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    /// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)`.
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    /// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    /// `int ibv_dealloc_pd(struct ibv_pd *)`.
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *, void *addr, size_t length, int access)`:
    /// what verbs.h's `ibv_reg_mr` macro calls when `access` has no `IBV_ACCESS_OPTIONAL_*`
    /// bit (the backend never sets one).
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: size_t, access: c_int)
        -> *mut ibv_mr;
    /// `int ibv_dereg_mr(struct ibv_mr *)`.
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    /// `struct ibv_cq *ibv_create_cq(struct ibv_context *, int cqe, void *cq_context,
    /// struct ibv_comp_channel *, int comp_vector)`.
    fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    /// `int ibv_destroy_cq(struct ibv_cq *)`.
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// `int ibv_get_cq_event(struct ibv_comp_channel *, struct ibv_cq **, void **cq_context)`.
    fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    /// `void ibv_ack_cq_events(struct ibv_cq *, unsigned int nevents)`.
    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
    /// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`.
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    /// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`.
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
    /// `int ibv_query_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask,
    /// struct ibv_qp_init_attr *)`.
    fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
    ) -> c_int;
    /// `int ibv_destroy_qp(struct ibv_qp *)`.
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// `struct ibv_srq *ibv_create_srq(struct ibv_pd *, struct ibv_srq_init_attr *)`.
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    /// `int ibv_modify_srq(struct ibv_srq *, struct ibv_srq_attr *, int srq_attr_mask)`.
    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int;
    /// `int ibv_query_srq(struct ibv_srq *, struct ibv_srq_attr *)`.
    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int;
    /// `int ibv_destroy_srq(struct ibv_srq *)`.
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    /// `int ibv_get_async_event(struct ibv_context *, struct ibv_async_event *)`.
    fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
    /// `void ibv_ack_async_event(struct ibv_async_event *)`.
    fn ibv_ack_async_event(event: *mut ibv_async_event);
}

/// The address of function `name` in `library` as a `T`, or `None` when it has no such symbol
/// (or it resolves to NULL).
///
/// # Safety
/// `T` is a function pointer type matching the C prototype of `name`.
unsafe fn symbol<T: Copy>(library: &Library, name: &str) -> Option<T> {
    // SAFETY: `Option<T>` of a function pointer has the size of `void *` with NULL as `None`
    // (libloading checks the size); the prototype is the caller's contract.
    let sym = unsafe { library.get::<Option<T>>(name.as_bytes()) }.ok()?;
    *sym
}

/// The process's libibverbs, loaded at the first call: [`HwError::NoLibrary`] when
/// `libibverbs.so.1` cannot be loaded or lacks one of the functions of [`Lib`].
pub(crate) fn lib() -> Result<&'static Lib, HwError> {
    static LIB: OnceLock<Lib> = OnceLock::new();
    if let Some(lib) = LIB.get() {
        return Ok(lib);
    }
    // SAFETY: loading libibverbs runs its initialisers (and, when the test suite puts librnic
    // there, librnic's), which have no requirement on the caller; the library is never
    // unloaded, so its termination routines run at process exit only, as for a program
    // linked against it.
    let library = unsafe { Library::new(LIBRARY) }.map_err(|_| HwError::NoLibrary)?;
    let lib = Lib::resolve(library).map_err(|_| HwError::NoLibrary)?;
    // Two threads may have loaded it at once: the loser's copy is dropped, which only lowers
    // the library's reference count (`dlclose` of a library still open elsewhere).
    Ok(LIB.get_or_init(|| lib))
}
