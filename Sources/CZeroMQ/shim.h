#ifndef ROLLCALL_CZEROMQ_SHIM_H
#define ROLLCALL_CZEROMQ_SHIM_H
// libzmq as Debian ships it (libzmq3-dev, 4.3.4): stable API only, no draft symbols.
#include <zmq.h>
#endif
