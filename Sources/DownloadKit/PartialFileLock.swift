import CDownloadKitShims
import Glibc

/// One destination, one writer: an exclusive advisory lock (`flock`) on a download's partial file.
///
/// `flock` locks belong to the open file description, so a second `Download` in the same process
/// conflicts exactly like a second process, and the kernel releases the lock when the holder's
/// descriptor closes — a `kill -9` never leaves a stale lock. The lock is held on a descriptor of its
/// own (not the engine's write handle) from `prepare` until after the final rename or cleanup, so a
/// second writer can never lock the inode that has just become the finished file: after taking the
/// lock, the path is checked to still name the locked inode (else the open is retried), which also
/// closes the window where the first writer renamed or removed the file in between.
///
/// The holder's pid is recorded in a `user.downloadkit.writer` extended attribute (best effort; file
/// systems without user xattrs just make the error say "another download").
final class PartialFileLock {
    let path: String
    private let fd: Int32

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    deinit { close(fd) }

    static let writerAttribute = "user.downloadkit.writer"

    /// Opens (creating it 0600 if needed) and locks `path`.
    /// - Throws: `DownloadError` `.destinationInUse` naming the other writer when it is locked, or
    ///   `.fileSystem` when it cannot be opened.
    static func acquire(_ path: String, destination: String) throws(DownloadError) -> PartialFileLock {
        for _ in 0..<8 {
            let fd = path.withCString { open($0, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }
            if fd < 0 {
                let code = errno
                throw DownloadError(
                    .fileSystem, "cannot open \(path): \(String(cString: strerror(code)))",
                    underlying: FileSystemError("open", path: path, errno: code).description)
            }
            if flock(fd, LOCK_EX | LOCK_NB) != 0 {
                let code = errno
                let holder = writer(of: fd)
                close(fd)
                if code == EWOULDBLOCK || code == EAGAIN {
                    let who = holder.map { "another download (pid \($0))" } ?? "another download"
                    throw DownloadError(
                        .destinationInUse,
                        "\(destination) is in use by \(who): its partial file \(path) is locked; one destination has one writer")
                }
                throw DownloadError(.fileSystem, "cannot lock \(path): \(String(cString: strerror(code)))")
            }
            // The path must still name the inode just locked (not renamed into place or unlinked by the
            // writer that held it a moment ago).
            var opened = stat()
            var named = stat()
            if fstat(fd, &opened) == 0, opened.st_nlink > 0, lstat(path, &named) == 0,
                named.st_dev == opened.st_dev, named.st_ino == opened.st_ino
            {
                recordWriter(fd)
                return PartialFileLock(path: path, fd: fd)
            }
            close(fd)
        }
        throw DownloadError(.destinationInUse, "\(destination) keeps changing under another download's hands: \(path)")
    }

    private static func recordWriter(_ fd: Int32) {
        let text = Array("\(getpid())".utf8)
        _ = text.withUnsafeBytes { bytes in
            dk_fsetxattr(fd, writerAttribute, bytes.baseAddress, bytes.count)
        }
    }

    private static func writer(of fd: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { dk_fgetxattr(fd, writerAttribute, $0.baseAddress, $0.count) }
        guard count > 0, let text = String(validating: buffer[0..<count], as: UTF8.self),
            text.allSatisfy({ $0.isNumber })
        else { return nil }
        return text
    }
}
