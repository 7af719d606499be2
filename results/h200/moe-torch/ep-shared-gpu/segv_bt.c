// Diagnostic only (not part of the project): prints a native backtrace on SIGSEGV, then re-raises.
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void on_segv(int sig) {
  void* frames[64];
  const char msg[] = "\n== SIGSEGV backtrace ==\n";
  write(2, msg, sizeof msg - 1);
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa; memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv; sa.sa_flags = SA_ONSTACK;
  static char alt[1 << 16]; stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  sigaltstack(&ss, 0);
  sigaction(SIGSEGV, &sa, 0);
}
