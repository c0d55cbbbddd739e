import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Unix-domain socket helpers shared by the client and the daemon.
public enum UnixSocket {
    /// `$XDG_RUNTIME_DIR/downloadkit/daemon.sock`, else `/run/user/<uid>/downloadkit/daemon.sock`.
    public static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        let runtime = environment["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/run/user/\(geteuid())"
        return runtime + "/downloadkit/daemon.sock"
    }

    /// A `sockaddr_un` for `path`, or nil when the path does not fit (107 bytes).
    public static func address(_ path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity, !bytes.contains(0) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        return address
    }

    /// Connects a new close-on-exec stream socket to `path`.
    /// - Returns: The descriptor, or the `errno` of the failure (ENAMETOOLONG for a path that does not fit).
    public static func connect(_ path: String) -> Result<Int32, DKErrno> {
        guard var address = address(path) else { return .failure(DKErrno(ENAMETOOLONG)) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(DKErrno(errno)) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result != 0 {
            let error = errno
            close(fd)
            return .failure(DKErrno(error))
        }
        return .success(fd)
    }

    /// The credentials of the process at the other end of a connected Unix socket (SO_PEERCRED: the
    /// peer's when it called `connect` or `listen`).
    public struct PeerCredentials: Sendable, Hashable {
        public var pid: pid_t = 0
        public var uid: uid_t = 0
        public var gid: gid_t = 0

        /// The connected peer's credentials, or nil when the kernel does not say.
        public static func of(_ fd: Int32) -> PeerCredentials? {
            // `struct ucred` from <sys/socket.h> (Glibc's module leaves it out without _GNU_SOURCE).
            var raw: (pid_t, uid_t, gid_t) = (0, 0, 0)
            var length = socklen_t(MemoryLayout<(pid_t, uid_t, gid_t)>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &raw, &length) == 0,
                length == socklen_t(MemoryLayout<(pid_t, uid_t, gid_t)>.size)
            else { return nil }
            return PeerCredentials(pid: raw.0, uid: raw.1, gid: raw.2)
        }
    }

    /// Why a socket path's directory is not one only this user controls, or nil when it is.
    ///
    /// The rule, shared by the daemon (before it binds) and every client (before it connects): the
    /// directory that holds the socket is a real directory (not a symbolic link), owned by this
    /// process's effective uid, and neither group- nor world-writable. The daemon creates it 0700; 0750 or
    /// 0755 are accepted too, because what matters is that no other user can add, remove or rename the
    /// socket there (the socket itself is 0600 and the daemon refuses other uids). A directory that does
    /// not exist is not judged here (connecting then fails with ENOENT).
    public static func untrustedDirectory(of path: String) -> String? {
        let parent = (path as NSString).deletingLastPathComponent
        let directory = parent.isEmpty ? "." : parent
        var info = stat()
        guard lstat(directory, &info) == 0 else { return nil }
        let mode = info.st_mode & 0o7777
        let modeText = "0" + String(mode, radix: 8)
        if info.st_mode & S_IFMT == S_IFLNK {
            return "its directory \(directory) is a symbolic link"
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { return "\(directory) is not a directory" }
        guard info.st_uid == geteuid() else {
            return "its directory \(directory) is owned by uid \(info.st_uid), not by uid \(geteuid()) (this process)"
        }
        guard mode & 0o022 == 0 else {
            return "its directory \(directory) (mode \(modeText)) is writable by other users"
        }
        return nil
    }

    /// Why a client refused to talk to a daemon socket.
    public enum DaemonConnectFailure: Error, Sendable, Hashable {
        /// Nothing could be connected: the `errno` of the failure.
        case unreachable(DKErrno)
        /// The socket's directory or its listener is not this user's; nothing was written to it.
        case untrusted(String)
    }

    /// Connects to the daemon socket at `path` only if it is this user's own: its directory passes
    /// ``untrustedDirectory(of:)`` before connecting, and the listening process runs as this process's
    /// effective uid (SO_PEERCRED) once connected — otherwise the descriptor is closed before a single
    /// byte is written. Root is not trusted either: a daemon serves exactly its own uid (docs/DAEMON.md).
    public static func connectToDaemon(_ path: String) -> Result<Int32, DaemonConnectFailure> {
        if let reason = untrustedDirectory(of: path) {
            return .failure(.untrusted("refusing the daemon socket \(path): \(reason); nothing was sent"))
        }
        let fd: Int32
        switch connect(path) {
        case .success(let connected): fd = connected
        case .failure(let error): return .failure(.unreachable(error))
        }
        guard let peer = PeerCredentials.of(fd), peer.uid == geteuid() else {
            let who = PeerCredentials.of(fd).map { "uid \($0.uid) (pid \($0.pid))" } ?? "an unidentifiable process"
            close(fd)
            return .failure(
                .untrusted(
                    "refusing the daemon socket \(path): it is served by \(who), not by uid \(geteuid()) (this process); nothing was sent"))
        }
        return .success(fd)
    }

    /// An `errno` value with its text.
    public struct DKErrno: Error, Sendable, Hashable, CustomStringConvertible {
        public var code: Int32
        public init(_ code: Int32) { self.code = code }
        public var description: String { String(cString: strerror(code)) }
    }

    /// Sets O_NONBLOCK.
    public static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }
}
