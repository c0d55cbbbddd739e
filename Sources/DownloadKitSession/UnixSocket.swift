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
