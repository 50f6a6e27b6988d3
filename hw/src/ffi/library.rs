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
//! a C program compiled today against `<infiniband/verbs.h>` binds to
//! (`ibv_create_qp@@IBVERBS_1.1`, not the 1.0 compatibility one). What verbs.h implements inline is not in the list: the data
//! path (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) calls through `context->ops` as the header's inline functions do
//! (`post.rs`, `verbs.rs`, `srq.rs`). `ibv_reg_mr` is the exported function verbs.h's macro
//! calls for the access bits the backend uses. `ibv_query_port` is the exported function
//! verbs.h's inline calls for a context that is not extended (librnic's); for an extended one
//! (rdma-core's providers) the inline calls `verbs_context->query_port` instead, which this
//! backend does not (it would need `struct verbs_context`'s layout): the exported function
//! answers the same from the provider, copying the prefix of `struct ibv_port_attr` the old
//! layout has (`state` … `link_layer`, `flags`: everything the backend reads) and leaving
//! `port_cap_flags2` zero.

use crate::HwError;
use libloading::Library;
use std::sync::OnceLock;
use verbs_abi::functions;

/// The file name `dlopen` searches for (`LD_LIBRARY_PATH`, the cache, the default paths), the
/// soname of rdma-core's libibverbs.
pub(crate) const LIBRARY: &str = "libibverbs.so.1";

/// Declares [`Lib`]: one field per required function, typed with its prototype in
/// `verbs_abi::functions`, and the loader that resolves them all.
macro_rules! functions {
    ($($name:ident),+ $(,)?) => {
        /// The libibverbs functions the backend calls, resolved from the loaded library; the
        /// library itself, never unloaded.
        pub(crate) struct Lib {
            $(
                #[doc = concat!("`", stringify!($name), "`.")]
                pub(super) $name: functions::$name,
            )+
            /// `ibv_query_gid_type` (driver.h, `IBVERBS_PRIVATE_*`): `None` where the library
            /// has no such symbol (the caller falls back to sysfs).
            pub(super) ibv_query_gid_type: Option<functions::ibv_query_gid_type>,
            /// Keeps the functions above mapped. Never dropped: [`Lib`] lives in a `static`.
            _library: Library,
        }

        impl Lib {
            /// Resolves every function of [`Lib`] in `library`; `Err` names the first missing
            /// one.
            fn resolve(library: Library) -> Result<Lib, &'static str> {
                Ok(Lib {
                    $(
                        // SAFETY: the type is the function's prototype (verbs-abi transcribes
                        // verbs.h's, and librnic's exports are checked against it).
                        $name: unsafe { symbol(&library, stringify!($name)) }
                            .ok_or(stringify!($name))?,
                    )+
                    // SAFETY: as above, driver.h's prototype.
                    ibv_query_gid_type: unsafe { symbol(&library, "ibv_query_gid_type") },
                    _library: library,
                })
            }
        }
    };
}

functions! {
    ibv_get_device_list,
    ibv_free_device_list,
    ibv_get_device_name,
    ibv_open_device,
    ibv_close_device,
    ibv_query_device,
    ibv_query_port,
    ibv_query_gid,
    ibv_create_comp_channel,
    ibv_destroy_comp_channel,
    ibv_alloc_pd,
    ibv_dealloc_pd,
    ibv_reg_mr,
    ibv_dereg_mr,
    ibv_create_cq,
    ibv_destroy_cq,
    ibv_get_cq_event,
    ibv_ack_cq_events,
    ibv_create_qp,
    ibv_modify_qp,
    ibv_query_qp,
    ibv_destroy_qp,
    ibv_create_srq,
    ibv_modify_srq,
    ibv_query_srq,
    ibv_destroy_srq,
    ibv_get_async_event,
    ibv_ack_async_event,
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
