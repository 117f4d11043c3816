// Internal, test-only: the ZRT_AIO_FAIL fault injection described in io_engine.h.
#pragma once

namespace zrt::aio::detail {

// Reads ZRT_AIO_FAIL=<read|write>:<N> and re-arms the process-wide request counters from zero;
// an unset or empty variable disarms. Throws zrt::Error on a malformed value. Called by every
// IoEngine constructor.
void arm_fault_injection_from_env();

// Counts one new request of its kind; true when it is the armed N-th one, which must then
// complete with EIO.
bool take_injected_failure(bool write);

}  // namespace zrt::aio::detail
