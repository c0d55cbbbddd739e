import Foundation

/// The fields DownloadKit reads from NSURLSession resume data (`cancelByProducingResumeData:`).
///
/// Three shapes exist in the wild and all are read:
/// - a plain property list (XML or binary) with `NSURLSessionResumeInfoVersion` 1: the temp file is named by its
///   absolute path, `NSURLSessionResumeInfoLocalPath`;
/// - the same with version 2 (and later 3/4 in plain form, as seed 001 shows for iOS 10): the temp file is named by
///   `NSURLSessionResumeInfoTempFileName`, relative to the app's temporary directory;
/// - iOS 12 and later: the whole resume data is an `NSKeyedArchiver` archive whose root is an `NSDictionary`
///   holding the same keys (version 4). It is recognised by its structure, not by the version number.
///
/// `NSURLSessionResumeCurrentRequest`/`OriginalRequest` hold archived `NSURLRequest`s whose layout is private.
/// ``requestedRangeStart`` is best effort: the reader looks for any dictionary with a `Range` key in those
/// archives and parses `bytes=N-`. When it cannot, the value is `nil` and decoding still succeeds.
public struct AppleResumeData: Sendable, Hashable {
    /// `NSURLSessionResumeInfoVersion` (1–4 are read).
    public var infoVersion: Int
    /// Whether the resume data was a keyed archive (iOS 12+ layout).
    public var isKeyedArchive: Bool
    /// `NSURLSessionDownloadURL`.
    public var downloadURL: String
    /// `NSURLSessionResumeBytesReceived`, in bytes.
    public var bytesReceived: Int64
    /// `NSURLSessionResumeEntityTag`, as received.
    public var entityTag: String?
    /// `NSURLSessionResumeInfoTempFileName` (version 2 and later).
    public var tempFileName: String?
    /// `NSURLSessionResumeInfoLocalPath` (version 1).
    public var localPath: String?
    /// `NSURLSessionResumeServerDownloadDate`: the `Last-Modified` the server sent.
    public var serverDownloadDate: String?
    /// The start of `Range: bytes=N-` found in the archived current (or else original) request, if any.
    public var requestedRangeStart: Int64?

    /// The highest `NSURLSessionResumeInfoVersion` this build reads.
    public static let newestInfoVersion = 4

    /// Creates a value; used by the decoder and by tests.
    public init(
        infoVersion: Int,
        isKeyedArchive: Bool = false,
        downloadURL: String,
        bytesReceived: Int64,
        entityTag: String? = nil,
        tempFileName: String? = nil,
        localPath: String? = nil,
        serverDownloadDate: String? = nil,
        requestedRangeStart: Int64? = nil
    ) {
        self.infoVersion = infoVersion
        self.isKeyedArchive = isKeyedArchive
        self.downloadURL = downloadURL
        self.bytesReceived = bytesReceived
        self.entityTag = entityTag
        self.tempFileName = tempFileName
        self.localPath = localPath
        self.serverDownloadDate = serverDownloadDate
        self.requestedRangeStart = requestedRangeStart
    }

    /// Decodes Apple resume data (XML, binary, or a keyed archive).
    /// - Parameter data: The resume data; may be hostile.
    /// - Throws: ``ResumeInfoError`` naming the offending key.
    public static func decode(_ data: Data) throws(ResumeInfoError) -> AppleResumeData {
        try decode(tree: PropertyListTree.parse(data).value)
    }

    static func decode(tree: ArchiveValue) throws(ResumeInfoError) -> AppleResumeData {
        let isKeyed = KeyedArchiveReader.isKeyedArchive(tree)
        let root = isKeyed ? try KeyedArchiveReader.decodeRoot(of: tree) : tree
        guard case .dictionary(let dictionary) = root else {
            throw ResumeInfoError(.notAPropertyList, "resume data's root is not a dictionary")
        }
        let fields = PlistFields(dictionary)
        let rawVersion = try fields.integer(.infoVersion)
        guard (1...Int64(newestInfoVersion)).contains(rawVersion) else {
            throw ResumeInfoError(
                .unsupportedVersion,
                key: ResumeInfoKey.infoVersion.rawValue,
                "NSURLSessionResumeInfoVersion \(rawVersion) is not one of 1–\(newestInfoVersion)"
            )
        }
        let version = Int(rawVersion)
        let tempFileName = try fields.optionalString(.tempFileName)
        let localPath = try fields.optionalString(.localPath)
        if tempFileName == nil, localPath == nil {
            throw ResumeInfoError.missing(version == 1 ? ResumeInfoKey.localPath.rawValue : ResumeInfoKey.tempFileName.rawValue)
        }
        let rangeStart =
            requestedRangeStart(in: dictionary["NSURLSessionResumeCurrentRequest"])
            ?? requestedRangeStart(in: dictionary["NSURLSessionResumeOriginalRequest"])
        return AppleResumeData(
            infoVersion: version,
            isKeyedArchive: isKeyed,
            downloadURL: try fields.string(.downloadURL),
            bytesReceived: try fields.integer(.bytesReceived),
            entityTag: try fields.optionalString(.entityTag),
            tempFileName: tempFileName,
            localPath: localPath,
            serverDownloadDate: try fields.optionalString(.serverDownloadDate),
            requestedRangeStart: rangeStart
        )
    }

    /// Converts to DownloadKit resume info and validates it.
    ///
    /// The temp file is `localPath` when present (version 1), else `temporaryDirectory/tempFileName`. The original
    /// URL is the download URL (Apple's plist does not keep it outside the request archive).
    /// - Parameters:
    ///   - temporaryDirectory: Where a bare temp file name lives; defaults to the process's temporary directory
    ///     (an iOS app's `tmp/` does not exist here).
    ///   - now: Used for ``ResumeInfo/created`` and ``ResumeInfo/updated``.
    /// - Throws: ``ResumeInfoError`` if a field breaks a ``ResumeInfo`` invariant (for example a temp file name
    ///   with `/`).
    public func resumeInfo(
        temporaryDirectory: String = FileManager.default.temporaryDirectory.path,
        now: Date = Date()
    ) throws(ResumeInfoError) -> ResumeInfo {
        let name: String
        let path: String
        if version1Path, let localPath {
            try ResumeInfo.checkAbsolutePath(localPath, key: .localPath)
            path = localPath
            name = tempFileName ?? String(localPath.split(separator: "/").last ?? "")
        } else if let tempFileName {
            try ResumeInfo.checkTempFileName(tempFileName)
            let directory = temporaryDirectory.hasSuffix("/") ? String(temporaryDirectory.dropLast()) : temporaryDirectory
            path = directory + "/" + tempFileName
            name = tempFileName
        } else if let localPath {
            try ResumeInfo.checkAbsolutePath(localPath, key: .localPath)
            path = localPath
            name = String(localPath.split(separator: "/").last ?? "")
        } else {
            throw ResumeInfoError.missing(ResumeInfoKey.tempFileName.rawValue)
        }
        let info = ResumeInfo(
            originalURL: downloadURL,
            currentURL: downloadURL,
            tempFilePath: path,
            tempFileName: name,
            bytesReceived: bytesReceived,
            entityTag: entityTag,
            lastModified: serverDownloadDate,
            created: now,
            updated: now,
            origin: .apple(version: infoVersion)
        )
        try info.validate()
        return info
    }

    /// Version 1 names the temp file by path; later versions by name (falling back to the path if that is all
    /// there is).
    private var version1Path: Bool { infoVersion == 1 || tempFileName == nil }

    /// Best effort: finds `Range: bytes=N-` in an archived request (data holding a keyed archive, or an object
    /// already decoded from the enclosing archive).
    private static func requestedRangeStart(in value: ArchiveValue?) -> Int64? {
        switch value {
        case .data(let bytes)?:
            guard let (tree, _) = try? PropertyListTree.parse(bytes), KeyedArchiveReader.isKeyedArchive(tree),
                let values = try? KeyedArchiveReader.stringValues(forDictionaryKey: "Range", in: tree)
            else { return nil }
            return values.lazy.compactMap(parseRangeStart).first
        case let decoded?:
            return firstString(forKey: "range", in: decoded, depth: 0).flatMap(parseRangeStart)
        case nil:
            return nil
        }
    }

    private static func firstString(forKey key: String, in value: ArchiveValue, depth: Int) -> String? {
        guard depth < ArchiveLimits.default.maxDepth else { return nil }
        switch value {
        case .dictionary(let fields), .object(_, let fields):
            for (name, item) in fields where name.lowercased() == key {
                if case .string(let text) = item { return text }
            }
            for item in fields.values {
                if let found = firstString(forKey: key, in: item, depth: depth + 1) { return found }
            }
            return nil
        case .array(let items):
            for item in items {
                if let found = firstString(forKey: key, in: item, depth: depth + 1) { return found }
            }
            return nil
        default:
            return nil
        }
    }

    /// Parses the first position of `bytes=N-` or `bytes=N-M` (RFC 9110 §14.1.2); suffix ranges give `nil`.
    static func parseRangeStart(_ header: String) -> Int64? {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return nil }
        let spec = trimmed.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        let digits = spec[..<dash].trimmingCharacters(in: .whitespaces)
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int64(digits)
    }
}

extension ResumeInfo {
    /// Exports Apple resume data, as far as the documented keys go.
    ///
    /// Produces a version-2 XML property list with `NSURLSessionDownloadURL`, `NSURLSessionResumeBytesReceived`,
    /// `NSURLSessionResumeEntityTag`, `NSURLSessionResumeInfoTempFileName`, `NSURLSessionResumeInfoLocalPath`,
    /// `NSURLSessionResumeServerDownloadDate` and `NSURLSessionResumeInfoVersion`. It does not contain
    /// `NSURLSessionResumeCurrentRequest`/`OriginalRequest`: those are archives of Apple's private `NSURLRequest`
    /// layout that cannot be produced faithfully here, and an Apple client may refuse data without them.
    /// - Returns: XML plist bytes.
    /// - Throws: ``ResumeInfoError`` if this value is invalid or encoding fails.
    public func appleResumeData() throws(ResumeInfoError) -> Data {
        try validate()
        var plist: [String: ArchiveValue] = [
            ResumeInfoKey.downloadURL.rawValue: .string(currentURL),
            ResumeInfoKey.bytesReceived.rawValue: .integer(bytesReceived),
            ResumeInfoKey.tempFileName.rawValue: .string(tempFileName),
            ResumeInfoKey.localPath.rawValue: .string(tempFilePath),
            ResumeInfoKey.infoVersion.rawValue: .integer(Int64(ResumeInfo.appleInfoVersion)),
        ]
        if let entityTag { plist[ResumeInfoKey.entityTag.rawValue] = .string(entityTag) }
        if let lastModified { plist[ResumeInfoKey.serverDownloadDate.rawValue] = .string(lastModified) }
        return try ResumeInfo.serialize(plist, format: .xml)
    }
}
