import CDownloadKitSystem
import Foundation
import Glibc
import HTTPClient

// The resume info's file I/O, apart from its codec (ResumeInfo.swift, which the resumeinfo fuzz target
// compiles alone): atomic durable writes, reads with a size bound, stale temporary files. The directory
// fsync is the file layer's one (`FileSystem.syncDirectory`).
extension ResumeInfo {

    /// Writes the resume info atomically and durably.
    ///
    /// Writes to `path + ".tmp-<pid>"`, `fsync`s it, `rename`s it over `path`, then `fsync`s the directory so the
    /// rename itself survives a crash (aria2's control-file save, done with the missing fsyncs). A crash leaves
    /// either the old file or the new one, never a mix. One writer per path at a time.
    /// - Parameters:
    ///   - path: Destination path of the plist.
    ///   - format: Encoding; binary by default.
    ///   - durable: When false, skips both `fsync`s: the rename is still atomic and survives a process
    ///     crash (the page cache does), but not necessarily a power loss. For checkpoints that claim no
    ///     new bytes (the engine records a response's validators this way), where losing the file only
    ///     falls back to the temp file's length.
    /// - Throws: ``ResumeInfoError`` (``ResumeInfoError/Code/ioFailed`` with its `errorNumber` for file-system failures);
    ///   the temporary file is removed on failure.
    public func write(to path: String, format: PropertyListFormat = .binary, durable: Bool = true) throws(ResumeInfoError) {
        try write(to: path, format: format, durable: durable, hooks: FileIOHooks())
    }

    /// ``write(to:format:durable:)`` for a download: its fence (``FileIOHooks``) is asked before the rename,
    /// which is the checkpoint.
    func write(
        to path: String, format: PropertyListFormat = .binary, durable: Bool = true, hooks: FileIOHooks
    ) throws(ResumeInfoError) {
        let data = try encoded(format: format)
        // Created exclusively (issue #44): a file or link planted at the temporary name is never opened;
        // it is left alone and a unique name is used instead (`FileSystem.createTemporary`).
        let descriptor: Int32
        let temporary: String
        do {
            (descriptor, temporary) = try FileSystem.createTemporary(path + ".tmp-")
        } catch {
            throw ResumeInfoError(.ioFailed, errorNumber: error.errorNumber, "open \(error.path): \(error.errorNumber)")
        }
        var isOpen = true
        do throws(ResumeInfoError) {
            let writeErrno = data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) -> DKErrno? in
                guard let base = buffer.baseAddress else { return nil }
                var offset = 0
                while offset < buffer.count {
                    let (written, failure) = retryingInterrupts { posixWrite(descriptor, base + offset, buffer.count - offset) }
                    if let failure { return failure }
                    offset += written
                }
                return nil
            }
            if let writeErrno { throw Self.ioError("write", temporary, code: writeErrno) }
            if durable, let failure = retryingInterrupts({ fsync(descriptor) }).errno {
                throw Self.ioError("fsync", temporary, code: failure)
            }
            isOpen = false
            guard close(descriptor) == 0 else { throw Self.ioError("close", temporary) }
            guard hooks.admits(.checkpoint) else { throw Self.ioError("rename (fenced: the lease on this download is lost)", path, code: .notPermitted) }
            if let failure = retryingInterrupts({ rename(temporary, path) }).errno {
                throw Self.ioError("rename", path, code: failure)
            }
        } catch {
            if isOpen { _ = close(descriptor) }
            _ = retryingInterrupts { unlink(temporary) }
            throw error
        }
        if durable { try Self.syncDirectory(containing: path) }
    }

    /// The extended attribute of a partial file that holds its download's first record (binary plist).
    static let partialAttribute = "user.downloadkit.resume"

    /// Stores this record on the open partial file itself, as its ``partialAttribute`` extended attribute.
    ///
    /// A download's first record (written when the response head is accepted, before any body byte; for a
    /// gathered small body, before its first write that does not complete it, see docs/ENGINE.md)
    /// goes here rather than into a `.dkresume` file: creating, renaming and unlinking a file per download
    /// cost more than the transfer of a small file (an inode and three directory operations under the
    /// directory's lock, contended by every concurrent download into it; issue #18). Like that first
    /// file it claims no synced bytes and is not synced: a process crash keeps it (the page cache
    /// survives), a power loss falls back to the partial's length, which the same-boot rule then refuses.
    /// Periodic checkpoints and stops still write the `.dkresume` file, which then takes precedence.
    /// - Parameters:
    ///   - descriptor: The partial file, open for writing (and locked by this download).
    ///   - hooks: The download's write fence (a fleet worker that lost its lease stores nothing).
    /// - Returns: False when the file system refuses it (no user xattrs, a record over the attribute size
    ///   limit, a lost lease): the caller writes the `.dkresume` file instead.
    func store(onPartial descriptor: Int32, hooks: FileIOHooks) -> Bool {
        guard hooks.admits(.checkpoint), let bytes = try? encoded(format: .binary) else { return false }
        return bytes.withUnsafeBytes { dk_fsetxattr(descriptor, Self.partialAttribute, $0.baseAddress, $0.count) } == 0
    }

    /// The record a download keeps on its partial file (`NAME.dkpart`) until its first checkpoint writes
    /// `NAME.dkresume`: what a process killed before that checkpoint leaves (docs/RESUME-INFO.md).
    ///
    /// - Parameter path: The partial file.
    /// - Returns: The record, or nil when there is no such file or attribute, or its value does not decode
    ///   (it is decoded like any record, every field validated: a planted value is never trusted).
    public static func stored(onPartial path: String) -> ResumeInfo? {
        storedRecord { dk_lgetxattr(path, partialAttribute, $0, $1) }
    }

    /// The record stored on a partial this download opened (and checked: ``FileSystem/openOwned(_:_:role:strict:)``),
    /// read from the descriptor, so it is the checked file's attribute and no other's.
    static func stored(onPartialDescriptor descriptor: Int32) -> ResumeInfo? {
        storedRecord { dk_fgetxattr(descriptor, partialAttribute, $0, $1) }
    }

    /// The partial's record through `getAttribute(buffer, size)` (a `getxattr` call: size 0 asks for the
    /// length), bounded by ``maxFileBytes`` and decoded like any record.
    private static func storedRecord(_ getAttribute: (UnsafeMutableRawPointer?, Int) -> Int) -> ResumeInfo? {
        let size = getAttribute(nil, 0)
        guard size > 0, size <= maxFileBytes else { return nil }
        var bytes = [UInt8](repeating: 0, count: size)
        let count = bytes.withUnsafeMutableBytes { getAttribute($0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return try? decode(Data(bytes[0..<count]))
    }

    /// The outcome of reading a download's own record file (``readRecord(at:)``).
    enum RecordFile {
        /// There is no record file (or it cannot be opened or decoded: the download restarts unless a
        /// validator proves the bytes).
        case absent
        /// The record, written by this user.
        case trusted(ResumeInfo)
        /// A file is there that this user did not write; the detail names it and why. Never read.
        case refused(String)
    }

    /// Reads the engine's own record file `NAME.dkresume`, trusting it only when this user wrote it: it is
    /// opened without following a link and the open descriptor is checked (a regular file owned by the
    /// effective user, not group- or other-writable, one link), as ssh checks its keys (issue #44).
    /// Imported resume data (``Download/init(resumingWith:destination:configuration:client:)``,
    /// ``read(from:)``) is not checked: the caller handing it in is the trust decision.
    static func readRecord(at path: String) -> RecordFile {
        var refusal: Int32 = 0
        let descriptor = dk_owned_open(path, O_RDONLY, 0, 1, &refusal)
        guard descriptor >= 0 else {
            return refusal == 0 ? .absent : .refused(FileSystem.untrusted(path, role: "resume record", refusal: refusal).detail)
        }
        defer { _ = close(descriptor) }
        guard let info = try? read(descriptor: descriptor, path: path) else { return .absent }
        return .trusted(info)
    }

    /// Removes the record ``store(onPartial:hooks:)`` left on a partial (before it becomes the finished file).
    static func removeStored(fromPartial descriptor: Int32) {
        _ = dk_fremovexattr(descriptor, partialAttribute)
    }

    /// Removes temporary files that ``write(to:format:)`` left beside `path` when its process died between
    /// writing them and renaming them into place (`<path>.tmp-<pid>` whose process no longer exists).
    /// The engine calls it once it holds the download's lock and only when there is something to resume
    /// (a partial with bytes, or a record): only the lock's holder writes records, so none can appear
    /// while it holds it, and a writer that died left its partial behind.
    ///
    /// The directory is read with `readdir` and each name compared in place: a thousand downloads into one
    /// directory call this two thousand times over a directory of a thousand names, and a Foundation listing
    /// (a `String` per name, per call) cost a quarter of a small file's CPU and tens of MiB of transient heap
    /// at 1,024 transfers (issues #18, #23; docs/BENCHMARKS.md).
    public static func removeStaleTemporaryFiles(for path: String) {
        let prefix = Array((FileSystem.lastComponent(of: path) + ".tmp-").utf8)
        guard let handle = opendir(FileSystem.directory(of: path)) else { return }
        defer { closedir(handle) }
        let ownPID = getpid()
        while let entry = readdir(handle) {
            let stale = withUnsafeBytes(of: &entry.pointee.d_name) { name -> Bool in
                guard let pid = processID(in: name, after: prefix), pid != ownPID else { return false }
                // kill(pid, 0) fails with ESRCH only when no such process exists: a live writer keeps its file.
                return kill(pid, 0) != 0 && errno == ESRCH
            }
            guard stale else { continue }
            withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: entry.pointee.d_name)) { name in
                    // Only our own leftovers: another user's file at such a name is not ours to remove (issue #44).
                    var status = stat()
                    guard fstatat(dirfd(handle), name, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_uid == geteuid() else { return }
                    _ = unlinkat(dirfd(handle), name, 0)
                }
            }
        }
    }

    /// The pid in a NUL-terminated directory entry name `<prefix><digits>`, or nil for any other name.
    private static func processID(in name: UnsafeRawBufferPointer, after prefix: [UInt8]) -> Int32? {
        var index = 0
        for byte in prefix {
            guard index < name.count, name[index] == byte else { return nil }
            index += 1
        }
        var pid: Int64 = 0
        var digits = 0
        while index < name.count, name[index] != 0 {
            let digit = name[index] &- UInt8(ascii: "0")
            guard digit < 10, digits < 10 else { return nil }
            pid = pid * 10 + Int64(digit)
            digits += 1
            index += 1
        }
        // `FileSystem.createTemporary`'s unique name when the plain one was taken: `<pid>-<8 hex digits>`.
        if index < name.count, name[index] == UInt8(ascii: "-"), digits > 0 {
            var hex = 0
            index += 1
            while index < name.count, name[index] != 0 {
                guard isHexDigit(name[index]) else { return nil }
                hex += 1
                index += 1
            }
            guard hex == 8 else { return nil }
        }
        guard digits > 0, pid > 0, pid <= Int64(Int32.max) else { return nil }
        return Int32(pid)
    }

    /// Reads and decodes a resume-info file (ours or Apple resume data).
    /// - Parameter path: Path of the plist.
    /// - Returns: The validated resume info.
    /// - Throws: ``ResumeInfoError``: ``ResumeInfoError/Code/ioFailed`` if the file cannot be read,
    ///   ``ResumeInfoError/Code/tooLarge`` beyond ``maxFileBytes``, and every error of ``decode(_:)``.
    public static func read(from path: String) throws(ResumeInfoError) -> ResumeInfo {
        let (descriptor, failure) = retryingInterrupts { open(path, O_RDONLY | O_CLOEXEC) }
        if let failure { throw ioError("open", path, code: failure) }
        defer { _ = close(descriptor) }
        return try read(descriptor: descriptor, path: path)
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// Reads and decodes the record open on `descriptor` (at most ``maxFileBytes``).
    private static func read(descriptor: Int32, path: String) throws(ResumeInfoError) -> ResumeInfo {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let (count, failure) = retryingInterrupts { chunk.withUnsafeMutableBytes { posixRead(descriptor, $0.baseAddress, $0.count) } }
            if let failure { throw ioError("read", path, code: failure) }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            guard bytes.count <= maxFileBytes else {
                throw ResumeInfoError(.tooLarge, "\(path) is larger than \(maxFileBytes) bytes")
            }
        }
        return try decode(Data(bytes))
    }

    private static func syncDirectory(containing path: String) throws(ResumeInfoError) {
        do {
            try FileSystem.syncDirectory(FileSystem.directory(of: path))
        } catch {
            throw ResumeInfoError(.ioFailed, errorNumber: error.errorNumber, "\(error)")
        }
    }

    /// Builds an I/O error; call it straight after the failing call so `errno` is still that call's.
    private static func ioError(_ operation: String, _ path: String, code: DKErrno = .current) -> ResumeInfoError {
        ResumeInfoError(.ioFailed, errorNumber: code, "\(operation) \(path): \(code)")
    }
}

/// `write(2)` and `read(2)`, named apart from ``ResumeInfo/write(to:format:)`` and ``ResumeInfo/read(from:)``.
private func posixWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}

private func posixRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(descriptor, buffer, count)
}
