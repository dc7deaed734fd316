// The system calls the worker's seccomp filter names (sandbox.cpp), numbered as this
// build's architecture numbers them (<sys/syscall.h>). A call the architecture lacks is
// left out of a list, or -1 (Filter::add skips it), as libseccomp skipped names it could
// not resolve: aarch64 and riscv64 have no open, fork, mkdir, chmod, ... (only their *at
// forms), riscv64 no renameat, x86_64 no chown32. Private to sandbox.cpp.
#pragma once

#include <sys/syscall.h>

namespace kestrel::device::sandbox::syscalls {

// Processes, debuggers and other processes' memory.
constexpr long kProcessCalls[] = {
#ifdef __NR_ptrace
    __NR_ptrace,
#endif
#ifdef __NR_process_vm_readv
    __NR_process_vm_readv,
#endif
#ifdef __NR_process_vm_writev
    __NR_process_vm_writev,
#endif
#ifdef __NR_kcmp
    __NR_kcmp,
#endif
#ifdef __NR_pidfd_open
    __NR_pidfd_open,
#endif
#ifdef __NR_pidfd_getfd
    __NR_pidfd_getfd,
#endif
#ifdef __NR_pidfd_send_signal
    __NR_pidfd_send_signal,
#endif
#ifdef __NR_tkill
    __NR_tkill,
#endif
};

// Namespaces, mounts, the kernel's own interfaces, io_uring (which would bypass the filter).
constexpr long kSystemCalls[] = {
#ifdef __NR_unshare
    __NR_unshare,
#endif
#ifdef __NR_setns
    __NR_setns,
#endif
#ifdef __NR_mount
    __NR_mount,
#endif
#ifdef __NR_umount2
    __NR_umount2,
#endif
#ifdef __NR_pivot_root
    __NR_pivot_root,
#endif
#ifdef __NR_chroot
    __NR_chroot,
#endif
#ifdef __NR_move_mount
    __NR_move_mount,
#endif
#ifdef __NR_open_tree
    __NR_open_tree,
#endif
#ifdef __NR_fsopen
    __NR_fsopen,
#endif
#ifdef __NR_fsmount
    __NR_fsmount,
#endif
#ifdef __NR_bpf
    __NR_bpf,
#endif
#ifdef __NR_perf_event_open
    __NR_perf_event_open,
#endif
#ifdef __NR_userfaultfd
    __NR_userfaultfd,
#endif
#ifdef __NR_keyctl
    __NR_keyctl,
#endif
#ifdef __NR_add_key
    __NR_add_key,
#endif
#ifdef __NR_request_key
    __NR_request_key,
#endif
#ifdef __NR_init_module
    __NR_init_module,
#endif
#ifdef __NR_finit_module
    __NR_finit_module,
#endif
#ifdef __NR_delete_module
    __NR_delete_module,
#endif
#ifdef __NR_kexec_load
    __NR_kexec_load,
#endif
#ifdef __NR_kexec_file_load
    __NR_kexec_file_load,
#endif
#ifdef __NR_reboot
    __NR_reboot,
#endif
#ifdef __NR_swapon
    __NR_swapon,
#endif
#ifdef __NR_swapoff
    __NR_swapoff,
#endif
#ifdef __NR_io_uring_setup
    __NR_io_uring_setup,
#endif
#ifdef __NR_io_uring_enter
    __NR_io_uring_enter,
#endif
#ifdef __NR_io_uring_register
    __NR_io_uring_register,
#endif
#ifdef __NR_acct
    __NR_acct,
#endif
#ifdef __NR_quotactl
    __NR_quotactl,
#endif
#ifdef __NR_syslog
    __NR_syslog,
#endif
#ifdef __NR_mknod
    __NR_mknod,
#endif
#ifdef __NR_mknodat
    __NR_mknodat,
#endif
};

// CPU batches: sockets, new processes and programs, changes to files (32-bit ARM's
// truncate64 and chown32 calls are the ones its C library makes for truncate and chown).
constexpr long kCpuCalls[] = {
#ifdef __NR_socket
    __NR_socket,
#endif
#ifdef __NR_socketpair
    __NR_socketpair,
#endif
#ifdef __NR_execve
    __NR_execve,
#endif
#ifdef __NR_execveat
    __NR_execveat,
#endif
#ifdef __NR_fork
    __NR_fork,
#endif
#ifdef __NR_vfork
    __NR_vfork,
#endif
#ifdef __NR_creat
    __NR_creat,
#endif
#ifdef __NR_truncate
    __NR_truncate,
#endif
#ifdef __NR_truncate64
    __NR_truncate64,
#endif
#ifdef __NR_unlink
    __NR_unlink,
#endif
#ifdef __NR_unlinkat
    __NR_unlinkat,
#endif
#ifdef __NR_rename
    __NR_rename,
#endif
#ifdef __NR_renameat
    __NR_renameat,
#endif
#ifdef __NR_renameat2
    __NR_renameat2,
#endif
#ifdef __NR_link
    __NR_link,
#endif
#ifdef __NR_linkat
    __NR_linkat,
#endif
#ifdef __NR_symlink
    __NR_symlink,
#endif
#ifdef __NR_symlinkat
    __NR_symlinkat,
#endif
#ifdef __NR_mkdir
    __NR_mkdir,
#endif
#ifdef __NR_mkdirat
    __NR_mkdirat,
#endif
#ifdef __NR_rmdir
    __NR_rmdir,
#endif
#ifdef __NR_chmod
    __NR_chmod,
#endif
#ifdef __NR_fchmod
    __NR_fchmod,
#endif
#ifdef __NR_fchmodat
    __NR_fchmodat,
#endif
#ifdef __NR_chown
    __NR_chown,
#endif
#ifdef __NR_fchown
    __NR_fchown,
#endif
#ifdef __NR_lchown
    __NR_lchown,
#endif
#ifdef __NR_chown32
    __NR_chown32,
#endif
#ifdef __NR_fchown32
    __NR_fchown32,
#endif
#ifdef __NR_lchown32
    __NR_lchown32,
#endif
#ifdef __NR_fchownat
    __NR_fchownat,
#endif
#ifdef __NR_open_by_handle_at
    __NR_open_by_handle_at,
#endif
#ifdef __NR_name_to_handle_at
    __NR_name_to_handle_at,
#endif
#ifdef __NR_shmget
    __NR_shmget,
#endif
#ifdef __NR_msgget
    __NR_msgget,
#endif
#ifdef __NR_semget
    __NR_semget,
#endif
};

// The calls with rules of their own (-1: this architecture lacks it).
#ifdef __NR_clone
constexpr long kClone = __NR_clone;
#else
constexpr long kClone = -1;
#endif
#ifdef __NR_clone3
constexpr long kClone3 = __NR_clone3;
#else
constexpr long kClone3 = -1;
#endif
#ifdef __NR_open
constexpr long kOpen = __NR_open;
#else
constexpr long kOpen = -1;
#endif
#ifdef __NR_openat
constexpr long kOpenat = __NR_openat;
#else
constexpr long kOpenat = -1;
#endif
#ifdef __NR_openat2
constexpr long kOpenat2 = __NR_openat2;
#else
constexpr long kOpenat2 = -1;
#endif
#ifdef __NR_socket
constexpr long kSocket = __NR_socket;
#else
constexpr long kSocket = -1;
#endif
#ifdef __NR_kill
constexpr long kKill = __NR_kill;
#else
constexpr long kKill = -1;
#endif
#ifdef __NR_tgkill
constexpr long kTgkill = __NR_tgkill;
#else
constexpr long kTgkill = -1;
#endif
#ifdef __NR_rt_sigqueueinfo
constexpr long kRtSigqueueinfo = __NR_rt_sigqueueinfo;
#else
constexpr long kRtSigqueueinfo = -1;
#endif
#ifdef __NR_rt_tgsigqueueinfo
constexpr long kRtTgsigqueueinfo = __NR_rt_tgsigqueueinfo;
#else
constexpr long kRtTgsigqueueinfo = -1;
#endif

}  // namespace kestrel::device::sandbox::syscalls
