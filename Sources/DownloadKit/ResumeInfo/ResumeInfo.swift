import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The encoding of a property list written by DownloadKit.
public enum PropertyListFormat: Sendable, Hashable {
    /// `bplist00`, compact; the default for resume info.
    case binary
    /// XML 1.0 plist, readable and diffable.
    case xml
}

/// The digest the finished file must match.
public struct ResumeChecksum: Sendable, Hashable {
    /// Digest name, for example `sha-256` or `md5`.
    public var algorithm: String
    /// Expected digest as hex (either case).
    public var expectedHex: String

    /// Creates a checksum expectation.
    public init(algorithm: String, expectedHex: String) {
        self.algorithm = algorithm
        self.expectedHex = expectedHex
    }
}

/// The names of every key DownloadKit reads or writes in a resume-info property list.
///
/// `NSURLSession*` keys use the names NSURLSession uses in its resume data, so the same file is meaningful to
/// both; `DownloadKit*` keys are ours. docs/RESUME-INFO.md documents each one.
public enum ResumeInfoKey: String, CaseIterable, Sendable {
    case downloadURL = "NSURLSessionDownloadURL"
    case bytesReceived = "NSURLSessionResumeBytesReceived"
    case entityTag = "NSURLSessionResumeEntityTag"
    case tempFileName = "NSURLSessionResumeInfoTempFileName"
    case localPath = "NSURLSessionResumeInfoLocalPath"
    case serverDownloadDate = "NSURLSessionResumeServerDownloadDate"
    case infoVersion = "NSURLSessionResumeInfoVersion"
    case formatVersion = "DownloadKitFormatVersion"
    case originalURL = "DownloadKitOriginalURL"
    case destinationPath = "DownloadKitDestinationPath"
    case fileName = "DownloadKitFileName"
    case lastModified = "DownloadKitLastModified"
    case totalLength = "DownloadKitTotalLength"
    case acceptsRanges = "DownloadKitAcceptsRanges"
    case checksumAlgorithm = "DownloadKitChecksumAlgorithm"
    case checksumExpected = "DownloadKitChecksumExpected"
    case segments = "DownloadKitSegments"
    case created = "DownloadKitCreated"
    case updated = "DownloadKitUpdated"
    case bootID = "DownloadKitBootID"
    /// Keys inside each `DownloadKitSegments` dictionary.
    case segmentStart = "start"
    case segmentEnd = "end"
    case segmentWritten = "written"
}

/// DownloadKit's checkpoint of a partial download, stored as a property list.
///
/// The truth is the bytes on disk; this is a durable note of how many of them are good and what they belong to.
/// It uses NSURLSession's key names where they exist plus `DownloadKit*` keys (see ``ResumeInfoKey`` and
/// docs/RESUME-INFO.md). ``decode(_:)`` also reads Apple resume data (versions 1, 2 and 4, XML, binary or keyed
/// archive), setting ``origin`` to ``Origin/apple(version:)``.
///
/// Dates are stored at one-second resolution (XML plists cannot hold more), so they round-trip identically in both
/// formats when they are whole seconds; ``encoded(format:)`` rounds them down.
public struct ResumeInfo: Sendable, Hashable {
    /// Where a decoded value came from.
    public enum Origin: Sendable, Hashable {
        /// DownloadKit's own resume info.
        case downloadKit
        /// NSURLSession resume data with the given `NSURLSessionResumeInfoVersion`.
        case apple(version: Int)
    }

    /// The value written to `DownloadKitFormatVersion`.
    public static let formatVersion = 1
    /// The value written to `NSURLSessionResumeInfoVersion` (the layout that carries a temp file name).
    public static let appleInfoVersion = 2
    /// Largest byte count or offset accepted (2^60, one exbibyte): more is hostile, and the headroom keeps
    /// `start + written` arithmetic from overflowing.
    public static let maxByteCount: Int64 = 1 << 60
    /// Largest resume-info file read, in bytes.
    public static let maxFileBytes = 4 * 1024 * 1024
    /// Largest number of segments accepted.
    public static let maxSegments = 65_536
    /// Largest UTF-8 length of a URL, ETag or date string, in bytes.
    public static let maxStringBytes = 64 * 1024

    /// The URL requested now, after redirects or a refresh (`NSURLSessionDownloadURL`).
    public var currentURL: String
    /// The URL the download was created with; its identity across redirects (`DownloadKitOriginalURL`).
    public var originalURL: String
    /// Contiguous durable bytes from offset 0, in bytes (`NSURLSessionResumeBytesReceived`). In segmented mode the
    /// segments are authoritative and this is the first segment's contiguous prefix.
    public var bytesReceived: Int64
    /// The `ETag` exactly as received, quotes and `W/` included (`NSURLSessionResumeEntityTag`).
    public var entityTag: String?
    /// The `Last-Modified` value as received (`DownloadKitLastModified`, mirrored to
    /// `NSURLSessionResumeServerDownloadDate`).
    public var lastModified: String?
    /// File name of the temp file (`NSURLSessionResumeInfoTempFileName`); one path component.
    public var tempFileName: String
    /// Absolute path of the temp file (`NSURLSessionResumeInfoLocalPath`).
    public var tempFilePath: String
    /// Absolute path the finished file will be moved to, if chosen (`DownloadKitDestinationPath`).
    public var destinationPath: String?
    /// The file name decided once (from `Content-Disposition`, the URL or a file ID) and kept across resumes
    /// (`DownloadKitFileName`); always a ``FileNaming/sanitizedFileName(_:)`` fixed point.
    public var fileName: String?
    /// Full length of the resource in bytes, when known (`DownloadKitTotalLength`).
    public var totalLength: Int64?
    /// Whether the server advertised or honoured byte ranges, when known (`DownloadKitAcceptsRanges`).
    public var acceptsRanges: Bool?
    /// The digest the finished file must match (`DownloadKitChecksumAlgorithm`/`DownloadKitChecksumExpected`).
    public var checksum: ResumeChecksum?
    /// Byte ranges of a segmented download, sorted and disjoint; empty in single-connection mode
    /// (`DownloadKitSegments`).
    public var segments: [ResumeSegment]
    /// When the download was first checkpointed (`DownloadKitCreated`).
    public var created: Date
    /// When this checkpoint was taken (`DownloadKitUpdated`).
    public var updated: Date
    /// The kernel boot id (`/proc/sys/kernel/random/boot_id`) when this checkpoint was taken
    /// (`DownloadKitBootID`). The same boot id on resume means only the process died, so the page cache
    /// (and every byte in the temp file) survived; a different one means only ``bytesReceived`` is trusted.
    public var bootID: String?
    /// Where this value was decoded from; not stored. ``Origin/downloadKit`` for values built in code.
    public var origin: Origin

    /// Creates resume info.
    /// - Parameters:
    ///   - originalURL: The URL the download was created with.
    ///   - currentURL: The URL in use now; defaults to `originalURL`.
    ///   - tempFilePath: Absolute path of the temp file.
    ///   - tempFileName: Its file name; defaults to the last component of `tempFilePath`.
    ///   - bytesReceived: Contiguous durable bytes from offset 0.
    ///   - entityTag: The `ETag` as received.
    ///   - lastModified: The `Last-Modified` value as received.
    ///   - destinationPath: Where the finished file goes.
    ///   - fileName: The decided file name.
    ///   - totalLength: Full resource length in bytes.
    ///   - acceptsRanges: Whether ranges are supported.
    ///   - checksum: The expected digest.
    ///   - segments: Segments of a segmented download.
    ///   - created: First checkpoint time; defaults to now.
    ///   - updated: This checkpoint's time; defaults to `created`.
    ///   - origin: Where the value came from.
    public init(
        originalURL: String,
        currentURL: String? = nil,
        tempFilePath: String,
        tempFileName: String? = nil,
        bytesReceived: Int64 = 0,
        entityTag: String? = nil,
        lastModified: String? = nil,
        destinationPath: String? = nil,
        fileName: String? = nil,
        totalLength: Int64? = nil,
        acceptsRanges: Bool? = nil,
        checksum: ResumeChecksum? = nil,
        segments: [ResumeSegment] = [],
        created: Date = Date(),
        updated: Date? = nil,
        origin: Origin = .downloadKit
    ) {
        self.originalURL = originalURL
        self.currentURL = currentURL ?? originalURL
        self.tempFilePath = tempFilePath
        self.tempFileName = tempFileName ?? String(tempFilePath.split(separator: "/").last ?? "")
        self.bytesReceived = bytesReceived
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.destinationPath = destinationPath
        self.fileName = fileName
        self.totalLength = totalLength
        self.acceptsRanges = acceptsRanges
        self.checksum = checksum
        self.segments = segments
        self.created = created
        self.updated = updated ?? created
        self.origin = origin
    }

    // MARK: - Encoding

    /// Serialises this resume info as a property list.
    /// - Parameter format: ``PropertyListFormat/binary`` (default) or ``PropertyListFormat/xml``.
    /// - Returns: The property-list bytes.
    /// - Throws: ``ResumeInfoError`` with ``ResumeInfoError/Code/invalidValue`` if the value would be refused by
    ///   ``decode(_:)`` (nothing is written that cannot be read back), or ``ResumeInfoError/Code/encodingFailed``.
    public func encoded(format: PropertyListFormat = .binary) throws(ResumeInfoError) -> Data {
        try validate()
        var plist: [String: ArchiveValue] = [
            ResumeInfoKey.formatVersion.rawValue: .integer(Int64(Self.formatVersion)),
            ResumeInfoKey.infoVersion.rawValue: .integer(Int64(Self.appleInfoVersion)),
            ResumeInfoKey.downloadURL.rawValue: .string(currentURL),
            ResumeInfoKey.originalURL.rawValue: .string(originalURL),
            ResumeInfoKey.bytesReceived.rawValue: .integer(bytesReceived),
            ResumeInfoKey.tempFileName.rawValue: .string(tempFileName),
            ResumeInfoKey.localPath.rawValue: .string(tempFilePath),
            ResumeInfoKey.created.rawValue: .date(Self.wholeSeconds(created)),
            ResumeInfoKey.updated.rawValue: .date(Self.wholeSeconds(updated)),
            ResumeInfoKey.segments.rawValue: .array(
                segments.map { segment in
                    .dictionary([
                        ResumeInfoKey.segmentStart.rawValue: .integer(segment.start),
                        ResumeInfoKey.segmentEnd.rawValue: .integer(segment.end ?? -1),
                        ResumeInfoKey.segmentWritten.rawValue: .integer(segment.written),
                    ])
                }),
        ]
        if let entityTag { plist[ResumeInfoKey.entityTag.rawValue] = .string(entityTag) }
        if let lastModified {
            plist[ResumeInfoKey.lastModified.rawValue] = .string(lastModified)
            plist[ResumeInfoKey.serverDownloadDate.rawValue] = .string(lastModified)
        }
        if let destinationPath { plist[ResumeInfoKey.destinationPath.rawValue] = .string(destinationPath) }
        if let fileName { plist[ResumeInfoKey.fileName.rawValue] = .string(fileName) }
        if let totalLength { plist[ResumeInfoKey.totalLength.rawValue] = .integer(totalLength) }
        if let acceptsRanges { plist[ResumeInfoKey.acceptsRanges.rawValue] = .bool(acceptsRanges) }
        if let bootID { plist[ResumeInfoKey.bootID.rawValue] = .string(bootID) }
        if let checksum {
            plist[ResumeInfoKey.checksumAlgorithm.rawValue] = .string(checksum.algorithm)
            plist[ResumeInfoKey.checksumExpected.rawValue] = .string(checksum.expectedHex)
        }
        return try Self.serialize(plist, format: format)
    }

    /// Binary plists are written by ``BinaryPropertyList`` (no Foundation bridging: a record is written
    /// per download); XML ones, for people to read, by Foundation.
    static func serialize(_ plist: [String: ArchiveValue], format: PropertyListFormat) throws(ResumeInfoError) -> Data {
        if format == .binary { return BinaryPropertyList.encode(.dictionary(plist)) }
        do {
            return try PropertyListSerialization.data(
                fromPropertyList: plist.mapValues(\.propertyListObject), format: .xml, options: 0)
        } catch {
            throw ResumeInfoError(.encodingFailed, "PropertyListSerialization failed: \(error)")
        }
    }

    private static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSinceReferenceDate: date.timeIntervalSinceReferenceDate.rounded(.down))
    }

    // MARK: - Decoding

    /// Decodes DownloadKit resume info or Apple NSURLSession resume data.
    ///
    /// DownloadKit plists are recognised by `DownloadKitFormatVersion`; Apple resume data by
    /// `NSURLSessionResumeInfoVersion`/`NSURLSessionDownloadURL` or by being an `NSKeyedArchiver` archive (iOS 12+).
    /// Apple data that names only a temp file (version 2+) is placed in the process's temporary directory; use
    /// ``AppleResumeData/resumeInfo(temporaryDirectory:now:)`` to choose another.
    /// - Parameter data: XML or binary property-list bytes; may be hostile.
    /// - Returns: Validated resume info with ``origin`` set.
    /// - Throws: ``ResumeInfoError`` naming the offending key; never traps.
    public static func decode(_ data: Data) throws(ResumeInfoError) -> ResumeInfo {
        let (tree, _) = try PropertyListTree.parse(data)
        if KeyedArchiveReader.isKeyedArchive(tree) {
            return try AppleResumeData.decode(tree: tree).resumeInfo()
        }
        guard case .dictionary(let dictionary) = tree else {
            throw ResumeInfoError(.notAPropertyList, "the property list's root is not a dictionary")
        }
        if dictionary[ResumeInfoKey.formatVersion.rawValue] != nil {
            return try decodeDownloadKit(dictionary)
        }
        if dictionary[ResumeInfoKey.infoVersion.rawValue] != nil || dictionary[ResumeInfoKey.downloadURL.rawValue] != nil {
            return try AppleResumeData.decode(tree: tree).resumeInfo()
        }
        throw ResumeInfoError.missing(ResumeInfoKey.formatVersion.rawValue)
    }

    private static func decodeDownloadKit(_ dictionary: [String: ArchiveValue]) throws(ResumeInfoError) -> ResumeInfo {
        let fields = PlistFields(dictionary)
        let version = try fields.integer(.formatVersion)
        guard version == Int64(formatVersion) else {
            throw ResumeInfoError(
                .unsupportedVersion,
                key: ResumeInfoKey.formatVersion.rawValue,
                "format version \(version) is not supported (this build reads \(formatVersion))"
            )
        }
        var checksum: ResumeChecksum?
        switch (try fields.optionalString(.checksumAlgorithm), try fields.optionalString(.checksumExpected)) {
        case (nil, nil): checksum = nil
        case (let algorithm?, let expected?): checksum = ResumeChecksum(algorithm: algorithm, expectedHex: expected)
        case (nil, _): throw ResumeInfoError.missing(ResumeInfoKey.checksumAlgorithm.rawValue)
        case (_, nil): throw ResumeInfoError.missing(ResumeInfoKey.checksumExpected.rawValue)
        }
        let lastModified = try fields.optionalString(.lastModified)
        let serverDownloadDate = try fields.optionalString(.serverDownloadDate)
        var info = ResumeInfo(
            originalURL: try fields.string(.originalURL),
            currentURL: try fields.string(.downloadURL),
            tempFilePath: try fields.string(.localPath),
            tempFileName: try fields.string(.tempFileName),
            bytesReceived: try fields.integer(.bytesReceived),
            entityTag: try fields.optionalString(.entityTag),
            lastModified: lastModified ?? serverDownloadDate,
            destinationPath: try fields.optionalString(.destinationPath),
            fileName: try fields.optionalString(.fileName),
            totalLength: try fields.optionalInteger(.totalLength),
            acceptsRanges: try fields.optionalBool(.acceptsRanges),
            checksum: checksum,
            segments: try fields.segments(),
            created: try fields.date(.created),
            updated: try fields.date(.updated),
            origin: .downloadKit
        )
        info.bootID = try fields.optionalString(.bootID)
        try info.validate()
        return info
    }

    // MARK: - Validation

    /// Checks every invariant ``decode(_:)`` enforces.
    /// - Throws: ``ResumeInfoError`` with ``ResumeInfoError/Code/invalidValue`` naming the first offending key.
    public func validate() throws(ResumeInfoError) {
        try Self.checkHTTPURL(currentURL, key: .downloadURL)
        try Self.checkHTTPURL(originalURL, key: .originalURL)
        try Self.checkByteCount(bytesReceived, key: .bytesReceived)
        try Self.checkDate(created, key: .created)
        try Self.checkDate(updated, key: .updated)
        if let totalLength {
            try Self.checkByteCount(totalLength, key: .totalLength)
            guard bytesReceived <= totalLength else {
                throw ResumeInfoError.invalid(
                    ResumeInfoKey.bytesReceived.rawValue,
                    "bytes received (\(bytesReceived)) exceed the total length (\(totalLength))"
                )
            }
        }
        if let entityTag { try Self.checkText(entityTag, key: .entityTag) }
        if let lastModified { try Self.checkText(lastModified, key: .lastModified) }
        try Self.checkTempFileName(tempFileName)
        try Self.checkAbsolutePath(tempFilePath, key: .localPath)
        if let destinationPath { try Self.checkAbsolutePath(destinationPath, key: .destinationPath) }
        if let fileName, FileNaming.sanitizedFileName(fileName) != fileName {
            throw ResumeInfoError.invalid(ResumeInfoKey.fileName.rawValue, "file name is not a safe single path component")
        }
        if let checksum {
            let algorithm = checksum.algorithm.unicodeScalars
            guard !algorithm.isEmpty, algorithm.count <= 32,
                algorithm.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") })
            else {
                throw ResumeInfoError.invalid(ResumeInfoKey.checksumAlgorithm.rawValue, "algorithm name must be 1–32 ASCII letters, digits or '-'")
            }
            let hex = checksum.expectedHex.unicodeScalars
            guard !hex.isEmpty, hex.count <= 256, hex.count % 2 == 0, hex.allSatisfy({ $0.properties.isASCIIHexDigit }) else {
                throw ResumeInfoError.invalid(ResumeInfoKey.checksumExpected.rawValue, "expected digest must be an even number (≤ 256) of hex digits")
            }
        }
        try validateSegments()
    }

    private func validateSegments() throws(ResumeInfoError) {
        let key = ResumeInfoKey.segments.rawValue
        guard segments.count <= Self.maxSegments else {
            throw ResumeInfoError(.tooLarge, key: key, "\(segments.count) segments; the limit is \(Self.maxSegments)")
        }
        var previousEnd: Int64 = 0
        for (index, segment) in segments.enumerated() {
            guard segment.start >= 0, segment.start <= Self.maxByteCount else {
                throw ResumeInfoError.invalid(key, "segment \(index): start \(segment.start) is out of range")
            }
            guard segment.written >= 0, segment.written <= Self.maxByteCount else {
                throw ResumeInfoError.invalid(key, "segment \(index): written \(segment.written) is out of range")
            }
            guard index == 0 || segment.start >= previousEnd else {
                throw ResumeInfoError.invalid(key, "segment \(index) starts at \(segment.start), overlapping or before the previous segment")
            }
            if let end = segment.end {
                guard end > segment.start, end <= Self.maxByteCount else {
                    throw ResumeInfoError.invalid(key, "segment \(index): end \(end) is not after start \(segment.start)")
                }
                guard segment.written <= end - segment.start else {
                    throw ResumeInfoError.invalid(key, "segment \(index): written \(segment.written) exceeds its length \(end - segment.start)")
                }
                if let totalLength, end > totalLength {
                    throw ResumeInfoError.invalid(key, "segment \(index): end \(end) is beyond the total length \(totalLength)")
                }
                previousEnd = end
            } else {
                guard index == segments.count - 1, totalLength == nil else {
                    throw ResumeInfoError.invalid(key, "segment \(index): an unknown end (-1) is only allowed on the last segment of a download of unknown length")
                }
                if let totalLength, segment.start + segment.written > totalLength {
                    throw ResumeInfoError.invalid(key, "segment \(index) runs beyond the total length")
                }
            }
        }
    }

    static func checkHTTPURL(_ url: String, key: ResumeInfoKey) throws(ResumeInfoError) {
        try checkText(url, key: key)
        let bytes = url.utf8
        func hasScheme(_ scheme: StaticString) -> Bool {
            let prefix = UnsafeBufferPointer(start: scheme.utf8Start, count: scheme.utf8CodeUnitCount)
            guard bytes.count > prefix.count else { return false }
            // ASCII case folding of A–Z only: a blanket `| 0x20` would also map control bytes onto ':'
            // and '/' (0x1A, 0x0F) and so lean on checkText having refused them first.
            return zip(bytes, prefix).allSatisfy { ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 }
        }
        guard hasScheme("http://") || hasScheme("https://") else {
            throw ResumeInfoError.invalid(key.rawValue, "not an http or https URL")
        }
        // Printable ASCII has no white space but the space itself; anything else is asked of Unicode.
        let plainASCII = bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
        guard plainASCII || !url.unicodeScalars.contains(where: { $0 == " " || $0.properties.isWhitespace }) else {
            throw ResumeInfoError.invalid(key.rawValue, "URL contains white space")
        }
    }

    static func checkText(_ text: String, key: ResumeInfoKey) throws(ResumeInfoError) {
        guard text.utf8.count <= maxStringBytes else {
            throw ResumeInfoError(.tooLarge, key: key.rawValue, "string is \(text.utf8.count) bytes; the limit is \(maxStringBytes)")
        }
        // A horizontal tab is legal inside a field value (RFC 9110 §5.5), so a validator may carry one.
        // Printable ASCII and tabs hold no control character; anything else is asked of Unicode (the
        // property lookups were 2 % of a small file's CPU, issue #18).
        let plainASCII = text.utf8.allSatisfy { ($0 >= 0x20 && $0 < 0x7F) || $0 == 0x09 }
        guard plainASCII || !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\t" })
        else {
            throw ResumeInfoError.invalid(key.rawValue, "string contains NUL or control characters")
        }
    }

    static func checkByteCount(_ value: Int64, key: ResumeInfoKey) throws(ResumeInfoError) {
        guard value >= 0 else { throw ResumeInfoError.invalid(key.rawValue, "byte count \(value) is negative") }
        guard value <= maxByteCount else {
            throw ResumeInfoError.invalid(key.rawValue, "byte count \(value) is beyond the \(maxByteCount) limit")
        }
    }

    /// The dates a record may carry: 1970-01-01 to 9999-12-31 (UTC). An XML property list writes dates as
    /// ISO 8601 with four-digit years, so a date outside that range does not survive a round trip; no
    /// checkpoint of ours is ever dated outside it (a fuzzer found a record dated 8.4 × 10⁸⁵ s).
    static let dateRange: ClosedRange<Double> = 0...253_402_300_799

    static func checkDate(_ date: Date, key: ResumeInfoKey) throws(ResumeInfoError) {
        guard dateRange.contains(date.timeIntervalSince1970) else {
            throw ResumeInfoError.invalid(key.rawValue, "date \(date.timeIntervalSince1970) s since 1970 is outside 1970–9999")
        }
    }

    static func checkTempFileName(_ name: String) throws(ResumeInfoError) {
        let key = ResumeInfoKey.tempFileName.rawValue
        guard !name.isEmpty, name != ".", name != "..", name.utf8.count <= FileNaming.maxNameBytes,
            !name.utf8.contains(UInt8(ascii: "/")), !name.utf8.contains(0)  // bytes: no Foundation search per record
        else {
            throw ResumeInfoError.invalid(key, "temp file name must be one path component (no '/', not '.' or '..', ≤ 255 bytes)")
        }
    }

    static func checkAbsolutePath(_ path: String, key: ResumeInfoKey) throws(ResumeInfoError) {
        guard path.hasPrefix("/"), path.utf8.count <= 4096, !path.utf8.contains(0) else {
            throw ResumeInfoError.invalid(key.rawValue, "must be an absolute path without NUL, at most 4096 bytes")
        }
    }

}


/// Typed access to a decoded plist dictionary, reporting wrong types with the key's name.
struct PlistFields {
    let values: [String: ArchiveValue]

    init(_ values: [String: ArchiveValue]) { self.values = values }

    func optionalString(_ key: ResumeInfoKey) throws(ResumeInfoError) -> String? {
        try optionalString(key.rawValue)
    }

    func optionalString(_ key: String) throws(ResumeInfoError) -> String? {
        switch values[key] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case let other?: throw ResumeInfoError.invalid(key, "expected a string, found \(PlistFields.kind(other))")
        }
    }

    func string(_ key: ResumeInfoKey) throws(ResumeInfoError) -> String {
        guard let value = try optionalString(key) else { throw ResumeInfoError.missing(key.rawValue) }
        return value
    }

    func optionalInteger(_ key: ResumeInfoKey) throws(ResumeInfoError) -> Int64? {
        try optionalInteger(key.rawValue)
    }

    func optionalInteger(_ key: String) throws(ResumeInfoError) -> Int64? {
        switch values[key] {
        case nil, .null?: return nil
        case .integer(let number)?: return number
        case let other?: throw ResumeInfoError.invalid(key, "expected an integer, found \(PlistFields.kind(other))")
        }
    }

    func integer(_ key: ResumeInfoKey) throws(ResumeInfoError) -> Int64 {
        guard let value = try optionalInteger(key) else { throw ResumeInfoError.missing(key.rawValue) }
        return value
    }

    func optionalBool(_ key: ResumeInfoKey) throws(ResumeInfoError) -> Bool? {
        switch values[key.rawValue] {
        case nil, .null?: return nil
        case .bool(let flag)?: return flag
        case let other?: throw ResumeInfoError.invalid(key.rawValue, "expected a boolean, found \(PlistFields.kind(other))")
        }
    }

    func date(_ key: ResumeInfoKey) throws(ResumeInfoError) -> Date {
        switch values[key.rawValue] {
        case nil, .null?: throw ResumeInfoError.missing(key.rawValue)
        case .date(let date)?: return date
        case let other?: throw ResumeInfoError.invalid(key.rawValue, "expected a date, found \(PlistFields.kind(other))")
        }
    }

    func segments() throws(ResumeInfoError) -> [ResumeSegment] {
        let key = ResumeInfoKey.segments.rawValue
        switch values[key] {
        case nil, .null?: return []
        case .array(let items)?:
            guard items.count <= ResumeInfo.maxSegments else {
                throw ResumeInfoError(.tooLarge, key: key, "\(items.count) segments; the limit is \(ResumeInfo.maxSegments)")
            }
            var result: [ResumeSegment] = []
            result.reserveCapacity(items.count)
            for (index, item) in items.enumerated() {
                guard case .dictionary(let fields) = item else {
                    throw ResumeInfoError.invalid(key, "segment \(index) is \(PlistFields.kind(item)), not a dictionary")
                }
                func number(_ name: ResumeInfoKey) throws(ResumeInfoError) -> Int64 {
                    guard case .integer(let value)? = fields[name.rawValue] else {
                        throw ResumeInfoError.invalid(key, "segment \(index): '\(name.rawValue)' is missing or not an integer")
                    }
                    return value
                }
                let end = try number(.segmentEnd)
                guard end >= -1 else { throw ResumeInfoError.invalid(key, "segment \(index): end \(end) is negative") }
                result.append(
                    ResumeSegment(start: try number(.segmentStart), end: end == -1 ? nil : end, written: try number(.segmentWritten))
                )
            }
            return result
        case let other?: throw ResumeInfoError.invalid(key, "expected an array, found \(PlistFields.kind(other))")
        }
    }

    static func kind(_ value: ArchiveValue) -> String {
        switch value {
        case .null: return "null"
        case .string: return "a string"
        case .integer: return "an integer"
        case .real: return "a real number"
        case .bool: return "a boolean"
        case .data: return "data"
        case .date: return "a date"
        case .array: return "an array"
        case .dictionary: return "a dictionary"
        case .object(let className, _): return "an archived \(className)"
        case .uid: return "a keyed-archive UID"
        }
    }
}
