//! The C structs of libibverbs and librdmacm, laid out as rdma-core's headers lay them out on
//! x86-64 (`<infiniband/verbs.h>`, `<rdma/rdma_cma.h>`). Names are the C names.
