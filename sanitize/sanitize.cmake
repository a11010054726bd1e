# sanitize/: what a sanitizer build (-DKVROUTE_SANITIZE=...) adds to every executable.
# Included from the root CMakeLists.txt before any target is defined.
if(KVROUTE_SANITIZE MATCHES "thread")
  # Debian's abseil is not TSan-instrumented; see tsan_absl_mutex.cc.
  add_library(kvroute_tsan_absl_mutex STATIC ${CMAKE_CURRENT_LIST_DIR}/tsan_absl_mutex.cc)
  set(_kvroute_wrapped
    _ZN4absl7debian35Mutex4LockEv _ZN4absl7debian35Mutex6UnlockEv
    _ZN4absl7debian35Mutex7TryLockEv _ZN4absl7debian35Mutex10ReaderLockEv
    _ZN4absl7debian35Mutex12ReaderUnlockEv _ZN4absl7debian35Mutex13ReaderTryLockEv
    _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE)
  foreach(sym ${_kvroute_wrapped})
    add_link_options(LINKER:--wrap=${sym})
    # Pulls the wrapper in even when only a shared abseil library calls the method (an
    # executable whose own code uses no absl::Mutex would otherwise leave it unresolved).
    add_link_options(LINKER:--undefined=__wrap_${sym})
  endforeach()
  link_libraries(kvroute_tsan_absl_mutex)
endif()
