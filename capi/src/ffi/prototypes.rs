//! Compile-time checks that librnic's exports have the prototypes of
//! `verbs_abi::functions`, the types the hardware backend calls them with (through `dlsym`,
//! when the tests load librnic.so as libibverbs.so.1) and that transcribe verbs.h's: a
//! parameter of another type here fails the build instead of corrupting a call.

use verbs_abi::functions;

/// `const _: functions::name = module::name;` for each: the coercion from the function item
/// to the pointer type compiles only if the signatures are equal.
macro_rules! same_prototype {
    ($($module:ident::$name:ident),+ $(,)?) => {
        $(const _: functions::$name = super::$module::$name;)+
    };
}

same_prototype! {
    verbs::ibv_get_device_list,
    verbs::ibv_free_device_list,
    verbs::ibv_get_device_name,
    verbs::ibv_open_device,
    verbs::ibv_close_device,
    verbs::ibv_query_device,
    verbs::ibv_query_port,
    verbs::ibv_query_gid,
    verbs::ibv_query_gid_type,
    cq::ibv_create_comp_channel,
    cq::ibv_destroy_comp_channel,
    verbs::ibv_alloc_pd,
    verbs::ibv_dealloc_pd,
    verbs::ibv_reg_mr,
    verbs::ibv_dereg_mr,
    cq::ibv_create_cq,
    cq::ibv_destroy_cq,
    cq::ibv_get_cq_event,
    cq::ibv_ack_cq_events,
    qp::ibv_create_qp,
    qp::ibv_modify_qp,
    qp::ibv_query_qp,
    qp::ibv_destroy_qp,
    srq::ibv_create_srq,
    srq::ibv_modify_srq,
    srq::ibv_query_srq,
    srq::ibv_destroy_srq,
    async_event::ibv_get_async_event,
    async_event::ibv_ack_async_event,
}
