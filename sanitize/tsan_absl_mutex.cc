// TSan builds only: tells ThreadSanitizer about absl::Mutex.
//
// Debian 12's libabsl_synchronization.so is built without -fsanitize=thread, so
// the atomics and futex waits inside absl::Mutex::Lock/Unlock are invisible to
// TSan: it would see no happens-before edge between two critical sections of
// the same mutex and report every ABSL_GUARDED_BY field as a data race. An
// instrumented abseil (mutex.cc's ABSL_TSAN_MUTEX_* annotations) is not
// packaged, so each call site is linked with `-Wl,--wrap=<symbol>` (see
// sanitize/CMakeLists.txt) to these functions, which run the real method and
// make the same __tsan_mutex_* annotations abseil makes when built with TSan.
//
// Covers what kvroute calls: Lock, Unlock, TryLock, ReaderLock, ReaderUnlock,
// ReaderTryLock, CondVar::Wait. Mutex::Await/LockWhen evaluate their condition
// inside the uninstrumented library and are not covered; only bench/ uses them
// and bench/ is not in the TSan stage.
//
// The symbols are abseil 20220623 in Debian's inline namespace `debian3`.
#include <sanitizer/tsan_interface.h>


extern "C" {

void __real__ZN4absl7debian35Mutex4LockEv(void* mu);
void __real__ZN4absl7debian35Mutex6UnlockEv(void* mu);
bool __real__ZN4absl7debian35Mutex7TryLockEv(void* mu);
void __real__ZN4absl7debian35Mutex10ReaderLockEv(void* mu);
void __real__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu);
bool __real__ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu);
void __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu);

void __wrap__ZN4absl7debian35Mutex4LockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  __real__ZN4absl7debian35Mutex4LockEv(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}

void __wrap__ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __real__ZN4absl7debian35Mutex6UnlockEv(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

bool __wrap__ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = __real__ZN4absl7debian35Mutex7TryLockEv(mu);
  __tsan_mutex_post_lock(
      mu, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed,
      0);
  return locked;
}

void __wrap__ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex10ReaderLockEv(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

void __wrap__ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  __real__ZN4absl7debian35Mutex12ReaderUnlockEv(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

bool __wrap__ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  const unsigned flags = __tsan_mutex_read_lock | __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, flags);
  const bool locked = __real__ZN4absl7debian35Mutex13ReaderTryLockEv(mu);
  __tsan_mutex_post_lock(mu, locked ? flags : flags | __tsan_mutex_try_lock_failed, 0);
  return locked;
}

// Wait releases `mu` and takes it again before returning; both halves are
// reported so that what the notifier wrote before unlocking is ordered before
// what the waiter reads after waking.
void __wrap__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  __real__ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(cv, mu);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

}  // extern "C"
