import DownloadKitDecisions
import Glibc
import HTTPClient

/// ``PieceVerifier`` shared by the segment workers of a download with piece checksums: every event takes
/// the one lock once (per credited buffer, per check), and the hashing reads the piece back from the file
/// outside the lock. No decision lives here.
///
/// Why the bytes are hashed from the file, not while they arrive: the bytes on disk are what must be
/// right (a short write, a stolen tail or a second writer would make a digest of the received stream
/// prove nothing about the file), a piece may be written by several requests and sources in any order
/// (work stealing splits segments), and a resumed download must check pieces it never received in this
/// run anyway. The cost is one read of each piece: from the page cache it was just written to, or from the disk
/// for the blocks ``DownloadConfiguration/directWrites`` sent past the cache.
final class PieceBoard: Sendable {
    let table: PieceChecksums
    let total: Int64
    /// ``PieceChecksums/fingerprint``, computed once.
    let fingerprint: Int64
    private let state: LockedValue<PieceVerifier>
    private let file: SharedFile

    init(_ table: PieceChecksums, total: Int64, verifier: PieceVerifier, file: FileHandleFD) {
        self.table = table
        self.total = total
        fingerprint = table.fingerprint
        state = LockedValue(verifier)
        self.file = SharedFile(handle: file)
    }

    /// Whether piece `index`'s bytes in the file match its digest.
    func matches(_ index: Int) throws(FileSystemError) -> Bool {
        try Self.matches(index, of: table, total: total, in: file.handle)
    }

    /// Whether piece `index`'s bytes in `handle` match its digest.
    static func matches(_ index: Int, of table: PieceChecksums, total: Int64, in handle: FileHandleFD) throws(FileSystemError) -> Bool {
        guard table.digests.indices.contains(index) else { return false }
        let digest = DKDigest(table.algorithm)
        try handle.hash(table.range(ofPiece: index, total: total), into: digest)
        return digest.finalize() == table.digests[index]
    }

    func credit(_ range: Range<Int64>, from source: Int) -> [Int] { state.withLock { $0.credit(range, from: source) } }

    func checked(_ piece: Int, good: Bool, eligible: [Int]) -> PieceVerifier.Decision {
        state.withLock { $0.checked(piece, good: good, eligible: eligible) }
    }

    var allVerified: Bool { state.withLock { $0.allVerified } }
    var verified: [Int] { state.withLock { $0.verified } }

    /// The error of a piece no source could give a good copy of.
    func failure(_ piece: Int) -> DownloadError {
        let copies = state.withLock { $0.badCopyCount(piece) }
        return DownloadError(
            .pieceChecksumMismatch,
            "\(PieceChecksums.name(piece, table.range(ofPiece: piece, total: total))) failed its \(table.algorithm.rawValue) check \(copies) times; no source gave a good copy")
    }

    /// Per source: (bad pieces it sent, pieces fetched again from it).
    func counts() -> (bad: [Int], refetched: [Int]) {
        state.withLock { ($0.badPieces, $0.refetched) }
    }
}

extension FileHandleFD {
    /// Feeds the file's bytes `range` into `digest`, 1 MiB at a time.
    /// - Throws: ``FileSystemError`` when a read fails or the file ends before the range does.
    func hash(_ range: Range<Int64>, into digest: DKDigest) throws(FileSystemError) {
        guard !range.isEmpty else { return }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { chunk.deallocate() }
        var position = range.lowerBound
        while position < range.upperBound {
            let want = Int(min(Int64(chunk.count), range.upperBound - position))
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: chunk[0..<want]), fromAbsoluteOffset: position)
            if n == 0 { throw FileSystemError("pread", path: path, errorNumber: .ioError) }
            digest.update(UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            position += Int64(n)
        }
    }
}
