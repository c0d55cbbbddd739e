#if canImport(HTTPWire)
    import HTTPWire
#endif

/// What DownloadKit fetches for one `<file>` of a Metalink: the one rule that the CLI's `get --metalink` and
/// the RPC's `aria2.addMetalink` share, decided from the parsed model alone (no I/O).
///
/// The best-priority `http`/`https` URL is the download's URL and the other `http`/`https` URLs its mirrors,
/// in priority order; the hash to check is the strongest whole-file hash of an algorithm the caller can
/// compute, and the piece hashes the strongest such list; the `<size>` is checked only when no hash is (a whole-file hash already fails a download of
/// another length). The name is the document's, already refused by the parser when unsafe
/// (``MetalinkFileName``).
public struct MetalinkFilePlan: Sendable, Hashable {
    /// The file's relative path (``MetalinkFile/name``).
    public var name: String
    /// The best-priority http(s) URL.
    public var url: String
    /// The other http(s) URLs, best first.
    public var mirrors: [String]
    /// The strongest whole-file hash the caller can check, if the document has one.
    public var hash: HashDigest?
    /// The strongest list of piece hashes the caller can check, if the document has one (checked piece by piece as
    /// the download goes: a bad piece is fetched again from another source).
    public var pieces: MetalinkPieces?
    /// The `<size>` to check after the download: the document's size when no ``hash`` is checked, else nil.
    public var sizeToCheck: Int64?
    /// What is left out, one line each: skipped metaurls, torrents and non-http URLs; hashes of algorithms
    /// the caller cannot check.
    public var notes: [String]

    /// The plan for `file`, or nil when it has no http(s) URL (metaurls and other schemes are never
    /// downloaded; the caller names the file in its own error).
    /// - Parameters:
    ///   - checkable: Whether the caller computes an algorithm (the engine has no SHA-224).
    public init?(_ file: MetalinkFile, checkable: (HashAlgorithm) -> Bool) {
        let http = file.httpURLs.map(\.url)
        guard let first = http.first else { return nil }
        name = file.name
        url = first
        mirrors = Array(http.dropFirst())
        hash = file.hashes.filter { checkable($0.algorithm) }.max { $0.algorithm < $1.algorithm }
        pieces = file.pieces.filter { checkable($0.algorithm) }.max { $0.algorithm < $1.algorithm }
        sizeToCheck = hash == nil ? file.size : nil
        notes = []
        let skipped = file.metaURLs.count + file.urls.count - http.count
        if skipped > 0 {
            notes.append(
                "\(file.name): \(skipped) URL(s) skipped (metaurls, torrents and non-http schemes are not downloaded)")
        }
        if hash == nil && !file.hashes.isEmpty {
            notes.append(
                "\(file.name): no hash the engine computes (only \(file.hashes.map(\.algorithm.rawValue).joined(separator: ", "))); not verified"
            )
        }
        if pieces == nil && !file.pieces.isEmpty {
            notes.append(
                "\(file.name): no piece hashes the engine computes (only \(file.pieces.map(\.algorithm.rawValue).joined(separator: ", "))); pieces not verified"
            )
        }
    }
}
