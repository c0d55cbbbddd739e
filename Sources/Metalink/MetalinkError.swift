/// Why a Metalink document was refused: malformed XML, a limit reached, or a document that is well-formed XML
/// but not a usable Metalink (an unsafe file name, a bad hash, pieces that do not cover the file).
///
/// Like HTTPWire's `WireError`, the error is a struct wrapping an extensible ``Code``; `line` and `column`
/// (1-based; the column counts Unicode scalars) locate the problem in the document.
public struct MetalinkError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The category of the error. Compare against the static members (`.malformedXML`, …).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable, payload-free name for logs and metrics.
        public let name: String
        /// Creates a code.
        public init(_ name: String) { self.name = name }
        public var description: String { name }

        // XML
        /// The bytes are not well-formed XML (unclosed or mismatched tags, a bad name, attribute or reference,
        /// text outside the root, invalid UTF-8 or a character XML forbids).
        public static let malformedXML = Code("malformedXML")
        /// The document has a DOCTYPE. Refused outright: a DTD is how entity expansion ("billion laughs") and
        /// external entities (XXE) get in, and Metalink needs none.
        public static let doctypeRefused = Code("doctypeRefused")
        /// A reference to an entity other than the five XML predefines (`&lt;` `&gt;` `&amp;` `&apos;` `&quot;`).
        public static let undefinedEntity = Code("undefinedEntity")
        /// The XML declaration names an encoding other than UTF-8 (or its ASCII subset).
        public static let unsupportedEncoding = Code("unsupportedEncoding")
        /// An element or attribute prefix with no `xmlns:` declaration in scope.
        public static let unboundNamespacePrefix = Code("unboundNamespacePrefix")

        // Limits (MetalinkLimits)
        /// The document is larger than ``MetalinkLimits/maxBytes``.
        public static let sizeLimitExceeded = Code("sizeLimitExceeded")
        /// Elements nest deeper than ``MetalinkLimits/maxDepth``.
        public static let depthLimitExceeded = Code("depthLimitExceeded")
        /// The document has more than ``MetalinkLimits/maxElements`` elements.
        public static let elementLimitExceeded = Code("elementLimitExceeded")
        /// An element has more than ``MetalinkLimits/maxAttributes`` attributes (namespace declarations included).
        public static let attributeLimitExceeded = Code("attributeLimitExceeded")
        /// An attribute value or an element's text is longer than ``MetalinkLimits/maxValueBytes``.
        public static let valueLimitExceeded = Code("valueLimitExceeded")

        // Metalink
        /// The root element is not `metalink` in the Metalink 4 or Metalink 3 namespace.
        public static let notMetalink = Code("notMetalink")
        /// The document describes no file.
        public static let noFiles = Code("noFiles")
        /// A required attribute or value is missing (a file's `name`, a piece list's `length` or `type`, a URL).
        public static let missingField = Code("missingField")
        /// A file name is absolute, has a `..`, `.` or empty component, a NUL, control or bidirectional
        /// formatting character, a backslash, or a component DownloadKit's file naming would change.
        public static let unsafeFileName = Code("unsafeFileName")
        /// Two files have the same name.
        public static let duplicateFileName = Code("duplicateFileName")
        /// A `size` is not a non-negative decimal integer that fits in 64 bits.
        public static let invalidSize = Code("invalidSize")
        /// A hash is not hexadecimal of its algorithm's length, or two hashes of one algorithm differ.
        public static let invalidHash = Code("invalidHash")
        /// A piece `length` is not a positive decimal integer that fits in 64 bits.
        public static let invalidPieceLength = Code("invalidPieceLength")
        /// The number of piece hashes is not the number of pieces the size and piece length make.
        public static let pieceCountMismatch = Code("pieceCountMismatch")
        /// Metalink 3 piece indexes are missing, repeated, or not 0, 1, 2, … in some order.
        public static let invalidPieceIndex = Code("invalidPieceIndex")
        /// A `priority` (Metalink 4: 1–999999) or `preference` (Metalink 3: 0–100) is out of range or not a number.
        public static let invalidPriority = Code("invalidPriority")
    }

    /// What went wrong.
    public var code: Code
    /// The 1-based line of the problem, when known.
    public var line: Int?
    /// The 1-based column (in Unicode scalars) of the problem, when known.
    public var column: Int?
    /// A human-readable explanation naming the cause (the element, attribute, limit or file).
    public var detail: String

    /// Creates an error.
    public init(_ code: Code, line: Int? = nil, column: Int? = nil, _ detail: String) {
        self.code = code
        self.line = line
        self.column = column
        self.detail = detail
    }

    public var description: String {
        if let line, let column { return "\(code.name) at line \(line), column \(column): \(detail)" }
        return "\(code.name): \(detail)"
    }
}

/// Bounds on what the Metalink reader accepts; every one names itself in the ``MetalinkError`` it raises.
///
/// The defaults hold real documents with room to spare (a 100 GiB file in 1 MiB pieces is 102,400 piece hashes,
/// about 7 MiB of SHA-256 hex) and keep a hostile one from costing more than a few hundred megabytes of memory.
public struct MetalinkLimits: Sendable, Hashable {
    /// Maximum size of the document in bytes. Default 32 MiB.
    public var maxBytes: Int
    /// Maximum element nesting depth (the root is depth 1). Default 32; Metalink 3 needs 6.
    public var maxDepth: Int
    /// Maximum number of elements. Default 262,144.
    public var maxElements: Int
    /// Maximum attributes on one element, namespace declarations included. Default 32.
    public var maxAttributes: Int
    /// Maximum bytes of one attribute value or of one element's text, after references are decoded.
    /// Default 64 KiB.
    public var maxValueBytes: Int

    /// Creates limits; every argument defaults to the value of ``default``.
    public init(
        maxBytes: Int = 32 << 20, maxDepth: Int = 32, maxElements: Int = 262_144, maxAttributes: Int = 32,
        maxValueBytes: Int = 64 << 10
    ) {
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
        self.maxElements = maxElements
        self.maxAttributes = maxAttributes
        self.maxValueBytes = maxValueBytes
    }

    /// 32 MiB, depth 32, 262,144 elements, 32 attributes an element, 64 KiB values.
    public static let `default` = MetalinkLimits()
}
