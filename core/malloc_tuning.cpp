#include "core/malloc_tuning.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace zrt {

bool tune_malloc_for_large_models() {
#ifdef __GLIBC__
  static const bool done = ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLargeBlockBytes)) == 1 &&
                           ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimBytes)) == 1;
  return done;
#else
  return false;
#endif
}

}  // namespace zrt
