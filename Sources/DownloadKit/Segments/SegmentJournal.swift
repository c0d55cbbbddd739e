import Glibc

/// The progress journal of a segmented download, `<name>.dkjournal` beside `<name>.dkpart`.
///
/// After every buffer a worker writes to the temp file it appends one 32-byte record `[start, end)` of the
/// bytes it just wrote and credited, with one plain `write(2)` on an `O_APPEND` descriptor: no `fsync`.
/// A kill -9 keeps both the data and the record (the page cache survives a process death), so a rerun
/// on the same boot loses at most the buffers in flight. After a reboot the journal is not trusted
/// (its header carries the boot id) and only the fsynced checkpoint map counts. At each checkpoint the
/// journal is compacted: truncated to its header, then the board's written prefixes are appended.
///
/// Format: a header record then records, each 32 bytes little-endian: a 4-byte magic (`DKJH` header,
/// `DKJR` record), 4 zero bytes, two 64-bit numbers (header: boot-id hash and total length; record:
/// start and end), and an FNV-1a 64 of the first 24 bytes. A torn or garbled record fails its check
/// and is skipped (the reader resynchronises on the next valid record); no record is trusted beyond
/// the temp file's length or the total.
///
/// With piece checksums a `DKJV` record says a piece was verified: its index and the piece table's
/// fingerprint (``PieceChecksums``), so a journal written for another piece table proves nothing. A rerun
/// trusts only those; every other piece it finds written is hashed again from the file.
final class SegmentJournal: Sendable {
    static let recordSize = 32
    private static let headerMagic: UInt32 = 0x484A_4B44  // "DKJH"
    private static let recordMagic: UInt32 = 0x524A_4B44  // "DKJR"
    private static let pieceMagic: UInt32 = 0x564A_4B44  // "DKJV"

    let path: String
    private let fd: Int32

    /// The journal's path for a temp file `NAME.dkpart`: `NAME.dkjournal`.
    static func path(forTempFile tempPath: String) -> String {
        let stem = tempPath.hasSuffix(".dkpart") ? String(tempPath.dropLast(".dkpart".count)) : tempPath
        return stem + ".dkjournal"
    }

    /// Creates (or empties) the journal for a download of `total` bytes on this boot and appends `runs`
    /// (what is already written), so the journal alone describes the temp file from now on.
    ///
    /// An existing journal is emptied only when this user wrote it: a symbolic link, another
    /// user's file, or one writable by others at this name is refused, untouched.
    /// - Throws: ``DownloadError/Code/untrustedFile`` naming the journal, or ``FileSystemError``.
    init(path: String, total: Int64, runs: [Range<Int64>], pieces: VerifiedPieces? = nil) throws {
        let fd = try FileSystem.openOwned(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, role: "segment journal")
        let bytes = Self.encode(magic: Self.headerMagic, Self.bootHash(FileSystem.bootID), total) + Self.records(runs, pieces)
        do {
            try Self.writeAll(bytes, to: fd, path: path)
        } catch {
            close(fd)
            throw error
        }
        self.path = path
        self.fd = fd
    }

    deinit { close(fd) }

    /// Appends that `[range)` was written. Best effort: a failed append only means those bytes are
    /// fetched again after a kill, so it never stops the transfer.
    func append(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        append(magic: Self.recordMagic, range.lowerBound, range.upperBound)
    }

    /// Appends that `piece` of the table with `fingerprint` was verified (best effort, as ``append(_:)``).
    func appendVerified(_ piece: Int, fingerprint: Int64) {
        append(magic: Self.pieceMagic, Int64(piece), fingerprint)
    }

    private func append(magic: UInt32, _ first: Int64, _ second: Int64) {
        // No allocation on the body path: the record is built on the stack.
        withUnsafeTemporaryAllocation(byteCount: Self.recordSize, alignment: 8) { record in
            Self.encode(magic: magic, first, second, into: record)
            var done = 0
            while done < record.count {
                let n = Glibc.write(fd, record.baseAddress! + done, record.count - done)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                done += n
            }
        }
    }

    /// Compacts: truncates to the header, then appends the board's written prefixes. Records appended by
    /// workers meanwhile are either already in `runs()` (credited before it was read) or appended after
    /// the truncation, so nothing credited is lost.
    /// The verified pieces (read before the truncation, like the runs) are written again after it.
    func compact(_ runs: () -> [Range<Int64>], pieces: () -> VerifiedPieces? = { nil }) throws(FileSystemError) {
        let verified = pieces()
        while ftruncate(fd, off_t(Self.recordSize)) != 0 {
            if errno == EINTR { continue }
            throw FileSystemError("ftruncate", path: path, errorNumber: .current)
        }
        try Self.writeAll(Self.records(runs(), verified), to: fd, path: path)
    }

    /// Pieces verified under the piece table with `fingerprint`.
    struct VerifiedPieces: Sendable {
        var fingerprint: Int64
        var pieces: [Int]
    }

    private static func records(_ runs: [Range<Int64>], _ pieces: VerifiedPieces?) -> [UInt8] {
        var bytes: [UInt8] = []
        for run in runs { bytes += encode(magic: recordMagic, run.lowerBound, run.upperBound) }
        for piece in pieces?.pieces ?? [] { bytes += encode(magic: pieceMagic, Int64(piece), pieces?.fingerprint ?? 0) }
        return bytes
    }

    private static func writeAll(_ bytes: [UInt8], to fd: Int32, path: String) throws(FileSystemError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", path: path, errorNumber: .current)
            }
            done += n
        }
    }

    /// The ranges a journal proves were written, or none when it is missing, from another boot, for
    /// another total, or not written by this user (the checks of ``FileSystem/openOwned(_:_:role:strict:)``).
    static func read(path: String, total: Int64) -> [Range<Int64>] {
        parse(readBytes(path), bootID: FileSystem.bootID, total: total)
    }

    /// The pieces a journal records as verified under the piece table with `fingerprint` (none when it is
    /// missing, from another boot or total, or not this user's; records of another table are ignored).
    static func readVerified(path: String, total: Int64, fingerprint: Int64) -> Set<Int> {
        verifiedPieces(readBytes(path), bootID: FileSystem.bootID, total: total, fingerprint: fingerprint)
    }

    private static func readBytes(_ path: String) -> [UInt8] {
        guard let fd = try? FileSystem.openOwned(path, O_RDONLY, role: "segment journal") else { return [] }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += chunk[0..<n]
            if bytes.count > 64 << 20 { break }  // a journal is compacted every second; never read a huge one
        }
        return bytes
    }

    /// Parses journal bytes: the header must name this boot and `total`; valid records follow, garbage is
    /// skipped byte by byte until a record checks out again. Ranges are clipped to `[0, total)`.
    static func parse(_ bytes: [UInt8], bootID: String?, total: Int64) -> [Range<Int64>] {
        records(bytes, bootID: bootID, total: total).compactMap { record -> Range<Int64>? in
            guard record.magic == recordMagic else { return nil }
            let lower = max(0, record.first)
            let upper = min(total, record.second)
            return lower < upper ? lower..<upper : nil
        }
    }

    /// The verified pieces in journal bytes (the header's checks of ``parse(_:bootID:total:)``), of the
    /// table with `fingerprint` only.
    static func verifiedPieces(_ bytes: [UInt8], bootID: String?, total: Int64, fingerprint: Int64) -> Set<Int> {
        Set(
            records(bytes, bootID: bootID, total: total).compactMap { record -> Int? in
                guard record.magic == pieceMagic, record.second == fingerprint, record.first >= 0, record.first < Int64(Int32.max)
                else { return nil }
                return Int(record.first)
            })
    }

    /// The valid records after a header naming this boot and `total`; garbage is skipped byte by byte
    /// until a record checks out again.
    private static func records(_ bytes: [UInt8], bootID: String?, total: Int64) -> [(magic: UInt32, first: Int64, second: Int64)] {
        guard bootID != nil, bytes.count >= recordSize,
            let header = decode(bytes, at: 0), header.magic == headerMagic,
            header.first == bootHash(bootID), header.second == total
        else { return [] }
        var records: [(magic: UInt32, first: Int64, second: Int64)] = []
        var offset = recordSize
        while offset + recordSize <= bytes.count {
            if let record = decode(bytes, at: offset), record.magic == recordMagic || record.magic == pieceMagic {
                records.append(record)
                offset += recordSize
            } else {
                offset += 1
            }
        }
        return records
    }

    /// Removes the journal beside `tempPath`, if there is one of ours. Most downloads never have one: a lookup
    /// (lock-free once the kernel caches the miss) comes first, because `unlink` takes the directory's lock
    /// for writing even when the name is absent, and every download finishing into that directory waits
    /// on it.
    static func remove(forTempFile tempPath: String) {
        let journal = path(forTempFile: tempPath)
        var status = stat()
        // Only ours: another user's file or link at this name stays.
        guard lstat(journal, &status) == 0, status.st_uid == geteuid() else { return }
        _ = unlink(journal)
    }

    // MARK: - Encoding

    static func encode(magic: UInt32, _ first: Int64, _ second: Int64) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: recordSize) { buffer, count in
            encode(magic: magic, first, second, into: UnsafeMutableRawBufferPointer(buffer))
            count = recordSize
        }
    }

    /// Writes one record into the first 32 bytes of `buffer`.
    static func encode(magic: UInt32, _ first: Int64, _ second: Int64, into buffer: UnsafeMutableRawBufferPointer) {
        buffer.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt32.self)
        buffer.storeBytes(of: UInt32(0), toByteOffset: 4, as: UInt32.self)
        buffer.storeBytes(of: UInt64(bitPattern: first).littleEndian, toByteOffset: 8, as: UInt64.self)
        buffer.storeBytes(of: UInt64(bitPattern: second).littleEndian, toByteOffset: 16, as: UInt64.self)
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for index in 0..<24 { hash = (hash ^ UInt64(buffer[index])) &* 0x100_0000_01B3 }
        buffer.storeBytes(of: hash.littleEndian, toByteOffset: 24, as: UInt64.self)
    }

    private static func decode(_ bytes: [UInt8], at offset: Int) -> (magic: UInt32, first: Int64, second: Int64)? {
        func get(_ at: Int, _ count: Int) -> UInt64 {
            var value: UInt64 = 0
            for index in 0..<count { value |= UInt64(bytes[offset + at + index]) << (8 * UInt64(index)) }
            return value
        }
        guard get(4, 4) == 0, get(24, 8) == fnv1a(bytes[offset..<offset + 24]) else { return nil }
        return (UInt32(get(0, 4)), Int64(bitPattern: get(8, 8)), Int64(bitPattern: get(16, 8)))
    }

    private static func fnv1a(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        return hash
    }

    private static func bootHash(_ bootID: String?) -> Int64 {
        Int64(bitPattern: fnv1a(ArraySlice(Array((bootID ?? "").utf8))))
    }
}
