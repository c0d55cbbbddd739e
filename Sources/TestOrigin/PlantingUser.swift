import Foundation
import Glibc

/// Another local user for tests of files planted beside a destination: `nobody` (65534),
/// played for real through `setpriv --reuid=65534 --regid=65534 --clear-groups` (the tests run as root).
public enum OtherUser {
    /// nobody's uid and gid (`nogroup`).
    public static let id: UInt32 = 65534

    /// Runs `command` (a program and its arguments) as nobody; throws when it cannot run or fails.
    public static func run(_ command: [String]) throws {
        guard let setpriv = ProcessRunner.findExecutable("setpriv") else {
            throw OriginError("finding setpriv", detail: "setpriv (util-linux) is needed to play another user")
        }
        let result = try ProcessRunner.run(setpriv, ["--reuid=\(id)", "--regid=\(id)", "--clear-groups", "--"] + command)
        guard result.succeeded else { throw OriginError("running \(command) as nobody", detail: result.output) }
    }

    /// nobody creates a symbolic link at `link` pointing to `target`.
    public static func plantLink(at link: String, to target: String) throws { try run(["/bin/ln", "-s", target, link]) }

    /// nobody copies `source` (which nobody must be able to read) to `destination`: a file of nobody's.
    public static func plantCopy(of source: String, at destination: String) throws { try run(["/bin/cp", source, destination]) }
}

/// A directory other users can write, where they plant files, removed when released.
///
/// ``Kind/sticky`` is a `/tmp`-like 1777 directory (on a machine with `fs.protected_symlinks` set the kernel
/// itself refuses to follow another user's link there); ``Kind/groupWritable`` is root's, mode 0775, group
/// `nogroup` (nobody's group): the kernel never protects anything there.
public final class SharedDirectory: Sendable {
    public enum Kind: String, Sendable, CaseIterable, CustomStringConvertible {
        case sticky
        case groupWritable
        public var description: String { rawValue }
    }

    public let path: String

    public init(_ kind: Kind) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("dk-shared-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        switch kind {
        case .sticky:
            guard chmod(path, 0o1777) == 0 else { throw OriginError("chmod \(path)", detail: String(cString: strerror(errno))) }
        case .groupWritable:
            guard chown(path, 0, OtherUser.id) == 0, chmod(path, 0o775) == 0 else {
                throw OriginError("chown/chmod \(path)", detail: String(cString: strerror(errno)))
            }
        }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { path + "/" + name }
}

/// A root file another user must never get at: its bytes, owner and mode are checked after the attack.
public struct VictimFile: Sendable {
    public let path: String
    public let bytes: [UInt8]

    /// Creates `path` with `bytes`, owned by the caller (root), mode 0600.
    public init(_ path: String, bytes: [UInt8]) throws {
        self.path = path
        self.bytes = bytes
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw OriginError("creating \(path)", detail: String(cString: strerror(errno))) }
        defer { close(fd) }
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count, fchmod(fd, 0o600) == 0 else {
            throw OriginError("writing \(path)", detail: String(cString: strerror(errno)))
        }
    }

    /// Why the file is not as created (bytes, owner, mode, type), or nil when it is intact.
    public var damage: String? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return "\(path) is gone: \(String(cString: strerror(errno)))" }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return "\(path) is no longer a regular file" }
        guard st.st_uid == geteuid() else { return "\(path) now belongs to uid \(st.st_uid)" }
        guard st.st_mode & 0o7777 == 0o600 else { return "\(path) has mode \(String(st.st_mode & 0o7777, radix: 8))" }
        guard let now = FileManager.default.contents(atPath: path) else { return "\(path) cannot be read" }
        guard Array(now) == bytes else { return "\(path) holds \(now.count) other bytes" }
        return nil
    }
}

/// Whether `path` is a symbolic link (not followed).
public func isSymbolicLink(_ path: String) -> Bool {
    var st = stat()
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK
}

/// The owner of `path` (not following a link), or nil when it does not exist.
public func fileOwner(_ path: String) -> UInt32? {
    var st = stat()
    return lstat(path, &st) == 0 ? st.st_uid : nil
}
