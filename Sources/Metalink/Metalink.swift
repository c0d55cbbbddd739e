#if canImport(HTTPWire)
    import HTTPWire
#endif

/// A Metalink document (Metalink 4, RFC 5854, or the older Metalink 3.0 format) as values: the files it
/// describes, their sizes, hashes, piece hashes and sources. Both versions parse into this one model.
///
/// Parsing is pure (bytes in, a value or a ``MetalinkError`` out) and safe on hostile input: the XML reader
/// refuses a DOCTYPE, expands no entity, and bounds size, depth, element and attribute counts
/// (``MetalinkLimits``). See docs/METALINK.md.
public struct Metalink: Sendable, Hashable {
    /// The format a document was written in.
    public enum Version: Sendable, Hashable {
        /// Metalink 4 (RFC 5854), namespace ``Metalink/namespaceV4``.
        case v4
        /// Metalink 3.0, namespace ``Metalink/namespaceV3``.
        case v3
    }

    /// The Metalink 4 namespace (RFC 5854 §2).
    public static let namespaceV4 = "urn:ietf:params:xml:ns:metalink"
    /// The Metalink 3.0 namespace.
    public static let namespaceV3 = "http://www.metalinker.org/"

    /// The format the document was written in.
    public var version: Version
    /// The files, in document order; names are unique.
    public var files: [MetalinkFile]

    /// Creates a document.
    public init(version: Version, files: [MetalinkFile]) {
        self.version = version
        self.files = files
    }

    /// Parses a Metalink 4 or Metalink 3 document.
    /// - Parameters:
    ///   - bytes: The document (UTF-8; a byte-order mark is allowed).
    ///   - limits: Bounds on the XML; ``MetalinkLimits/default`` unless a caller tightens them.
    /// - Throws: ``MetalinkError`` naming the cause, with the line and column where it was found.
    public init(parsing bytes: [UInt8], limits: MetalinkLimits = .default) throws(MetalinkError) {
        let root = try XMLReader.parse(bytes, limits: limits)
        self = try MetalinkReader.metalink(from: root)
    }

    /// Parses a Metalink document held in a string.
    public init(parsing text: String, limits: MetalinkLimits = .default) throws(MetalinkError) {
        try self.init(parsing: Array(text.utf8), limits: limits)
    }
}

/// One file of a Metalink document.
public struct MetalinkFile: Sendable, Hashable {
    /// The file's relative path, `/`-separated (RFC 5854 §4.1.2.1 allows directories). Safe by construction:
    /// see ``MetalinkFileName``.
    public var name: String
    /// The size in bytes, when the document gives it.
    public var size: Int64?
    /// Whole-file hashes of algorithms DownloadKit knows, one per algorithm, in document order.
    public var hashes: [HashDigest]
    /// Piece hashes, one list per algorithm, in document order.
    public var pieces: [MetalinkPieces]
    /// The file's URLs, best first (see ``MetalinkURL/priority``).
    public var urls: [MetalinkURL]
    /// Metadata URLs (a torrent and the like), best first. Kept for completeness; DownloadKit cannot fetch
    /// the file through them.
    public var metaURLs: [MetalinkMetaURL]

    /// Creates a file.
    public init(
        name: String, size: Int64? = nil, hashes: [HashDigest] = [], pieces: [MetalinkPieces] = [],
        urls: [MetalinkURL] = [],
        metaURLs: [MetalinkMetaURL] = []
    ) {
        self.name = name
        self.size = size
        self.hashes = hashes
        self.pieces = pieces
        self.urls = urls
        self.metaURLs = metaURLs
    }

    /// The strongest whole-file hash, the one to check the finished file with.
    public var strongestHash: HashDigest? { hashes.max { $0.algorithm < $1.algorithm } }

    /// The piece hashes of the strongest algorithm, the ones to check each piece with.
    public var strongestPieces: MetalinkPieces? { pieces.max { $0.algorithm < $1.algorithm } }

    /// The URLs DownloadKit can fetch (`http` and `https`, case-insensitively), best first.
    public var httpURLs: [MetalinkURL] {
        urls.filter { url in
            let scheme = url.url.prefix { $0 != ":" }.lowercased()
            return (scheme == "http" || scheme == "https") && url.url.dropFirst(scheme.count).hasPrefix("://")
        }
    }
}

/// Piece hashes: the file cut into pieces of ``length`` bytes (the last one shorter), one hash per piece.
public struct MetalinkPieces: Sendable, Hashable {
    /// The hash function of every piece hash.
    public var algorithm: HashAlgorithm
    /// The piece length in bytes, positive.
    public var length: Int64
    /// The hash of piece 0, 1, 2, …
    public var hashes: [HashDigest]

    /// Creates piece hashes.
    public init(algorithm: HashAlgorithm, length: Int64, hashes: [HashDigest]) {
        self.algorithm = algorithm
        self.length = length
        self.hashes = hashes
    }

    /// The number of pieces a file of `size` bytes has with this piece length.
    public func pieceCount(forSize size: Int64) -> Int64 {
        size == 0 ? 0 : (size - 1) / length + 1
    }
}

/// A URL of a file, with its rank and location.
public struct MetalinkURL: Sendable, Hashable {
    /// The lowest (worst) priority: what a URL without one gets, so it ranks after every URL that has one.
    public static let lowestPriority = 999_999

    /// The URL as written (surrounding white space removed).
    public var url: String
    /// The rank, 1 (best) to 999,999 (worst), Metalink 4's `priority` (RFC 5854 §4.2.16.2). A Metalink 3
    /// `preference` p (0–100, higher is better) becomes 101 − p, so preference 100 is priority 1 and
    /// preference 0 is priority 101. A URL without either gets ``lowestPriority``.
    public var priority: Int
    /// The server's ISO 3166-1 alpha-2 country code, lower-cased; `nil` when absent or not two letters.
    public var location: String?

    /// Creates a URL.
    public init(url: String, priority: Int = MetalinkURL.lowestPriority, location: String? = nil) {
        self.url = url
        self.priority = priority
        self.location = location
    }
}

/// A metadata URL (Metalink 4 `metaurl`, Metalink 3 `url type="bittorrent"`): a document such as a torrent
/// that describes how to get the file. Never downloadable by DownloadKit.
public struct MetalinkMetaURL: Sendable, Hashable {
    /// The URL as written.
    public var url: String
    /// The media type, lower-cased (`torrent`).
    public var mediaType: String
    /// The rank, as ``MetalinkURL/priority``.
    public var priority: Int
    /// The name of the file inside the described resource (Metalink 4 `name`), when given.
    public var name: String?

    /// Creates a metadata URL.
    public init(url: String, mediaType: String, priority: Int = MetalinkURL.lowestPriority, name: String? = nil) {
        self.url = url
        self.mediaType = mediaType
        self.priority = priority
        self.name = name
    }

    /// Always `false`: DownloadKit fetches over HTTP(S) only, never through a torrent or similar.
    public var isDownloadable: Bool { false }
}
