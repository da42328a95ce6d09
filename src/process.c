/* process.c: core.process, the few generic Linux process calls the zkcoord
 * command needs (it runs on any Lua, so not through an FFI): start a
 * program in its own process group, wait for children without blocking,
 * signal, read blocked signals from a signalfd, poll, child subreaper,
 * close-on-exec, and a guard process that kills a process group when its
 * parent dies. Errors: nil, message. No policy here: the command decides. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compat.h"
#include "process.h"

extern char **environ;

static int fail(lua_State *L, const char *what, int e)
{
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", what, strerror(e));
    return 2;
}

/* block_signals({signo...}): blocks them in this thread (and every thread
 * it starts later) and returns a non-blocking, close-on-exec signalfd that
 * reads them. */
static int p_block_signals(lua_State *L)
{
    sigset_t set;
    int i, n, fd;
    luaL_checktype(L, 1, LUA_TTABLE);
    sigemptyset(&set);
    n = (int)zk_rawlen(L, 1);
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        sigaddset(&set, (int)luaL_checkinteger(L, -1));
        lua_pop(L, 1);
    }
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return fail(L, "sigprocmask", errno);
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return fail(L, "signalfd", errno);
    lua_pushinteger(L, fd);
    return 1;
}

/* read_signals(fd): the signals pending on the signalfd, in order, as
 * { {signo =}, ... }. */
static int p_read_signals(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1), n = 0;
    struct signalfd_siginfo si;
    lua_newtable(L);
    for (;;) {
        ssize_t r = read(fd, &si, sizeof si);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != (ssize_t)sizeof si)
            break;
        lua_createtable(L, 0, 1);
        lua_pushinteger(L, (lua_Integer)si.ssi_signo);
        lua_setfield(L, -2, "signo");
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

/* poll(timeout, fd...): waits up to timeout seconds until one of the fds
 * (at most 8) is readable; returns how many are. */
static int p_poll(lua_State *L)
{
    struct pollfd pfds[8];
    double t = luaL_checknumber(L, 1);
    int n = lua_gettop(L) - 1, i, r, ms;
    luaL_argcheck(L, n >= 0 && n <= 8, 2, "at most 8 descriptors");
    /* (int)(NaN * 1000) is undefined (in practice poll forever). */
    luaL_argcheck(L, t == t, 1, "timeout must be a number, not NaN");
    for (i = 0; i < n; i++) {
        pfds[i].fd = (int)luaL_checkinteger(L, i + 2);
        pfds[i].events = POLLIN;
        pfds[i].revents = 0;
    }
    ms = t <= 0 ? 0 : (t > 86400 ? 86400000 : (int)(t * 1000 + 0.5));
    r = poll(pfds, (nfds_t)n, ms);
    if (r < 0 && errno != EINTR)
        return fail(L, "poll", errno);
    lua_pushinteger(L, r < 0 ? 0 : r);
    return 1;
}

/* The strings of array `idx`, NULL-terminated (they live as long as it). */
static const char **strings(lua_State *L, int idx, int *count)
{
    int n = (int)zk_rawlen(L, idx), i;
    const char **v = lua_newuserdata(L, sizeof(char *) * (size_t)(n + 1));
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        v[i - 1] = luaL_checkstring(L, -1);
        lua_pop(L, 1);     /* still referenced by the table */
    }
    v[n] = NULL;
    *count = n;
    return v;
}

/* spawn(argv, env, pgroup): starts argv[1] (searched in PATH) with argv,
 * an empty signal mask and default dispositions. env: name -> value added
 * to (or replacing in) our environment, or nil. pgroup true: in a process
 * group of its own (its pgid is its pid). Returns the pid, or nil, message,
 * the status a shell gives (127 not found, 126 not executable, else 71).
 * posix_spawn, not fork: no Lua runs in the child of a threaded process. */
static int p_spawn(lua_State *L)
{
    posix_spawnattr_t attr;
    sigset_t empty, all;
    const char **argv, **envp;
    int argc, n_env = 0, n_extra = 0, i, k = 0, rc;
    pid_t pid;
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
    if (lua_toboolean(L, 3))
        flags |= POSIX_SPAWN_SETPGROUP;
    lua_settop(L, 2);
    luaL_checktype(L, 1, LUA_TTABLE);
    argv = strings(L, 1, &argc);
    luaL_argcheck(L, argc > 0, 1, "empty argv");
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            n_extra++;
            lua_pop(L, 1);
        }
    }
    while (environ && environ[n_env])
        n_env++;
    envp = lua_newuserdata(L, sizeof(char *) * (size_t)(n_env + n_extra + 1));
    for (i = 0; i < n_env; i++) {
        const char *eq = strchr(environ[i], '=');
        int replaced = 0;
        if (eq && n_extra) {
            lua_pushlstring(L, environ[i], (size_t)(eq - environ[i]));
            lua_rawget(L, 2);
            replaced = !lua_isnil(L, -1);
            lua_pop(L, 1);
        }
        if (!replaced)
            envp[k++] = environ[i];
    }
    if (n_extra) {
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            luaL_argcheck(L, lua_type(L, -2) == LUA_TSTRING, 2, "names must be strings");
            lua_pushvalue(L, -2);
            lua_pushliteral(L, "=");
            lua_pushvalue(L, -3);
            lua_concat(L, 3);
            envp[k++] = lua_tostring(L, -1);
            lua_insert(L, 3);          /* keep the string below the iteration */
            lua_pop(L, 1);
        }
    }
    envp[k] = NULL;
    sigemptyset(&empty);
    sigfillset(&all);
    if ((rc = posix_spawnattr_init(&attr)) != 0)
        return fail(L, "posix_spawnattr_init", rc);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, flags);
    rc = posix_spawnp(&pid, argv[0], NULL, &attr, (char *const *)argv, (char *const *)envp);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", argv[0], strerror(rc));
        lua_pushinteger(L, rc == ENOENT ? 127 : ((rc == EACCES || rc == ENOEXEC) ? 126 : 71));
        return 3;
    }
    lua_pushinteger(L, pid);
    return 1;
}

/* wait(pid, stopped): waitpid without blocking (pid -1: any child, -pgid:
 * any in that group). Returns pid, status as a shell gives it (exit code, or
 * 128 + signal), the signal or nil; with `stopped` true also pid, "stopped",
 * signal for a child stopped (Ctrl-Z); false when none has ended; nil,
 * "echild" when there is no such child left; nil, message on another error. */
static int p_wait(lua_State *L)
{
    pid_t want = (pid_t)luaL_checkinteger(L, 1), r;
    int st = 0, flags = WNOHANG | (lua_toboolean(L, 2) ? WUNTRACED : 0);
    do {
        r = waitpid(want, &st, flags);
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (r < 0) {
        if (errno == ECHILD) {
            lua_pushnil(L);
            lua_pushliteral(L, "echild");
            return 2;
        }
        return fail(L, "waitpid", errno);
    }
    lua_pushinteger(L, r);
    if (WIFSTOPPED(st)) {
        lua_pushliteral(L, "stopped");
        lua_pushinteger(L, WSTOPSIG(st));
        return 3;
    }
    if (WIFSIGNALED(st)) {
        lua_pushinteger(L, 128 + WTERMSIG(st));
        lua_pushinteger(L, WTERMSIG(st));
        return 3;
    }
    lua_pushinteger(L, WIFEXITED(st) ? WEXITSTATUS(st) : 71);
    return 2;
}

/* kill(pid, sig): pid < 0 signals the group -pid. true, or nil, message. */
static int p_kill(lua_State *L)
{
    if (kill((pid_t)luaL_checkinteger(L, 1), (int)luaL_checkinteger(L, 2)) != 0)
        return fail(L, "kill", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* subreaper(): makes this process the child subreaper of its descendants:
 * an orphan below it (a daemon's double fork) is reparented to it, not to
 * init, so it stays ours to wait for. */
static int p_subreaper(lua_State *L)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        return fail(L, "prctl(PR_SET_CHILD_SUBREAPER)", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* The guard's life (async-signal-safe calls only: we may be threaded). It
 * reads lines from fd 3: "<pgid>" arms it with that group, "q" ends it
 * quietly. End of file while armed means the parent died (the kernel
 * closed its end): SIGKILL to the group. */
static void guard_loop(void)
{
    char buf[64];
    size_t len = 0;
    long pgid = 0;
    for (;;) {
        ssize_t r = read(3, buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        for (;;) {
            char *nl = memchr(buf, '\n', len);
            size_t used;
            if (!nl)
                break;
            if (buf[0] == 'q')
                _exit(0);
            pgid = 0;
            for (char *c = buf; c < nl && *c >= '0' && *c <= '9'; c++)
                pgid = pgid * 10 + (*c - '0');
            used = (size_t)(nl - buf) + 1;
            memmove(buf, nl + 1, len - used);
            len -= used;
        }
        if (len == sizeof buf - 1)
            len = 0;
    }
    if (pgid > 1)
        kill((pid_t)-pgid, SIGKILL);
    _exit(0);
}

/* guard(): starts the guard, not as our child (a double fork: a subreaper
 * must not have to wait for it) and holding no descriptor of ours (no
 * terminal, pipe or ZooKeeper connection stays open through it). Returns
 * our close-on-exec end of a socket pair to it: write "<pgid>\n" to arm it,
 * "q\n" to end it (a socket, so that writing to a guard someone killed is
 * EPIPE, not a SIGPIPE that kills us). Signals blocked in the caller stay
 * blocked in it, so a terminal's Ctrl-C to our group does not end it. */
static int p_guard(lua_State *L)
{
    int fds[2], st = 0;
    pid_t mid;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return fail(L, "socketpair", errno);
    mid = fork();
    if (mid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return fail(L, "fork", e);
    }
    if (mid == 0) {
        pid_t g = fork();
        if (g != 0)
            _exit(g < 0 ? 1 : 0);
        if (dup2(fds[0], 3) < 0)
            _exit(1);
        if (syscall(SYS_close_range, 4U, ~0U, 0) != 0) {
            long max = sysconf(_SC_OPEN_MAX), fd;
            for (fd = 4; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
                close((int)fd);
        }
        close(0);
        close(1);
        close(2);
        guard_loop();
    }
    close(fds[0]);
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        close(fds[1]);
        lua_pushnil(L);
        lua_pushliteral(L, "fork: the guard process did not start");
        return 2;
    }
    lua_pushinteger(L, fds[1]);
    return 1;
}

/* write(fd, s): the whole string; true, or nil, message. To a socket
 * without SIGPIPE. */
static int p_write(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1);
    size_t len, off = 0;
    const char *s = luaL_checklstring(L, 2, &len);
    while (off < len) {
        ssize_t r = send(fd, s + off, len - off, MSG_NOSIGNAL);
        if (r < 0 && errno == ENOTSOCK)
            r = write(fd, s + off, len - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return fail(L, "write", errno);
        off += (size_t)r;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int p_close(lua_State *L)
{
    if (close((int)luaL_checkinteger(L, 1)) != 0)
        return fail(L, "close", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* fds(max): the descriptors below max open now, as a set { [fd] = true }. */
static int p_fds(lua_State *L)
{
    int max = (int)luaL_optinteger(L, 1, 4096), fd;
    lua_newtable(L);
    for (fd = 0; fd < max; fd++) {
        if (fcntl(fd, F_GETFD) >= 0) {
            lua_pushboolean(L, 1);
            lua_rawseti(L, -2, fd);
        }
    }
    return 1;
}

/* cloexec(fd): sets FD_CLOEXEC; false when fd is not open. */
static int p_cloexec(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1);
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (!(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0)
        return fail(L, "fcntl", errno);
    lua_pushboolean(L, 1);
    return 1;
}

/* foreground(fd, pgid): when fd is our controlling terminal and our group
 * is its foreground group, hands the terminal to group pgid (so it may read
 * it, and a Ctrl-C reaches it) and returns our group, to hand it back with
 * foreground(fd, that). Else false. SIGTTOU is blocked meanwhile: handing
 * it back from the background would stop us. */
static int p_foreground(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1);
    pid_t to = (pid_t)luaL_checkinteger(L, 2), ours = getpgrp();
    sigset_t ttou, old;
    int ok;
    if (!isatty(fd) || (tcgetpgrp(fd) != ours && to != ours)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    ok = tcsetpgrp(fd, to) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!ok)
        return fail(L, "tcsetpgrp", errno);
    lua_pushinteger(L, ours);
    return 1;
}

static int p_getpid(lua_State *L)
{
    lua_pushinteger(L, getpid());
    return 1;
}

static int p_hostname(lua_State *L)
{
    char buf[256];
    if (gethostname(buf, sizeof buf - 1) != 0)
        return fail(L, "gethostname", errno);
    buf[sizeof buf - 1] = '\0';
    lua_pushstring(L, buf);
    return 1;
}

/* walltime(): seconds since the epoch, with the fraction. */
static int p_walltime(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

void process_push(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"block_signals", p_block_signals},
        {"read_signals", p_read_signals},
        {"poll", p_poll},
        {"spawn", p_spawn},
        {"wait", p_wait},
        {"kill", p_kill},
        {"subreaper", p_subreaper},
        {"guard", p_guard},
        {"write", p_write},
        {"close", p_close},
        {"fds", p_fds},
        {"cloexec", p_cloexec},
        {"foreground", p_foreground},
        {"getpid", p_getpid},
        {"hostname", p_hostname},
        {"walltime", p_walltime},
        {NULL, NULL}
    };
    static const struct { const char *name; int signo; } sigs[] = {
        {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},
        {"TERM", SIGTERM}, {"CHLD", SIGCHLD}, {"CONT", SIGCONT}, {"STOP", SIGSTOP},
    };
    size_t i;
    lua_newtable(L);
    zk_setfuncs(L, funcs);
    lua_newtable(L);
    for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        lua_pushinteger(L, sigs[i].signo);
        lua_setfield(L, -2, sigs[i].name);
    }
    lua_setfield(L, -2, "SIG");
}
