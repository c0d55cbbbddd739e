#if canImport(HTTPWire)
    import HTTPWire
#endif

/// Turns a parsed XML tree into a ``Metalink``: the Metalink 4 and Metalink 3 vocabularies, one model.
/// Elements of other namespaces and unknown elements are ignored (RFC 5854 §2.1: extension elements).
enum MetalinkReader {
    static func metalink(from root: XMLElement) throws(MetalinkError) -> Metalink {
        guard root.localName == "metalink", let namespace = root.namespace,
            namespace == Metalink.namespaceV4 || namespace == Metalink.namespaceV3
        else {
            let shown = root.namespace.map { "{\($0)}" } ?? "(no namespace)"
            throw MetalinkError(
                .notMetalink, line: root.line, column: root.column,
                "root element is \(shown)\(root.localName), not metalink in \(Metalink.namespaceV4) or \(Metalink.namespaceV3)"
            )
        }
        let version: Metalink.Version = namespace == Metalink.namespaceV4 ? .v4 : .v3
        let fileElements =
            version == .v4
            ? root.children("file", in: namespace)
            : root.children("files", in: namespace).flatMap { $0.children("file", in: namespace) }
        guard !fileElements.isEmpty else {
            throw MetalinkError(.noFiles, line: root.line, column: root.column, "the document describes no file")
        }
        var files: [MetalinkFile] = []
        var names: Set<String> = []
        for element in fileElements {
            let file = version == .v4 ? try fileV4(element) : try fileV3(element)
            guard names.insert(file.name).inserted else {
                throw error(.duplicateFileName, element, "two files are named '\(file.name)'")
            }
            files.append(file)
        }
        return Metalink(version: version, files: files)
    }

    // MARK: - Metalink 4 (RFC 5854 §4)

    private static func fileV4(_ element: XMLElement) throws(MetalinkError) -> MetalinkFile {
        let ns = Metalink.namespaceV4
        var file = MetalinkFile(name: try fileName(element))
        file.size = try size(element, ns)
        for hash in element.children("hash", in: ns) { try add(hash, to: &file.hashes, in: file.name) }
        for pieces in element.children("pieces", in: ns) {
            guard let algorithm = try pieceAlgorithm(pieces),
                !file.pieces.contains(where: { $0.algorithm == algorithm })
            else { continue }
            let length = try pieceLength(pieces)
            let hashes = try pieces.children("hash", in: ns).map { (hash) throws(MetalinkError) in
                try digest(hash, algorithm, "piece hash of '\(file.name)'")
            }
            file.pieces.append(
                try checked(MetalinkPieces(algorithm: algorithm, length: length, hashes: hashes), pieces, file))
        }
        for url in element.children("url", in: ns) {
            file.urls.append(
                MetalinkURL(
                    url: try urlText(url), priority: try priorityV4(url), location: location(url.attribute("location")))
            )
        }
        for meta in element.children("metaurl", in: ns) {
            guard let mediaType = meta.attribute("mediatype").map(trimmed), !mediaType.isEmpty else {
                throw error(.missingField, meta, "<metaurl> of '\(file.name)' has no mediatype")
            }
            file.metaURLs.append(
                MetalinkMetaURL(
                    url: try urlText(meta), mediaType: mediaType.lowercased(), priority: try priorityV4(meta),
                    name: meta.attribute("name")))
        }
        return ranked(file)
    }

    private static func priorityV4(_ element: XMLElement) throws(MetalinkError) -> Int {
        guard let text = element.attribute("priority") else { return MetalinkURL.lowestPriority }
        guard let value = decimal(text), (1...Int64(MetalinkURL.lowestPriority)).contains(value) else {
            throw error(.invalidPriority, element, "priority '\(shown(text))' is not a number from 1 to 999999")
        }
        return Int(value)
    }

    // MARK: - Metalink 3.0

    private static func fileV3(_ element: XMLElement) throws(MetalinkError) -> MetalinkFile {
        let ns = Metalink.namespaceV3
        var file = MetalinkFile(name: try fileName(element))
        file.size = try size(element, ns)
        for verification in element.children("verification", in: ns) {
            for hash in verification.children("hash", in: ns) { try add(hash, to: &file.hashes, in: file.name) }
            for pieces in verification.children("pieces", in: ns) {
                guard let algorithm = try pieceAlgorithm(pieces),
                    !file.pieces.contains(where: { $0.algorithm == algorithm })
                else { continue }
                let length = try pieceLength(pieces)
                // <hash piece="N">: put in index order; every index 0..<count exactly once.
                let elements = pieces.children("hash", in: ns)
                var slots = [HashDigest?](repeating: nil, count: elements.count)
                for hash in elements {
                    guard let text = hash.attribute("piece"), let index = decimal(text), index < elements.count,
                        slots[Int(index)] == nil
                    else {
                        throw error(
                            .invalidPieceIndex, hash,
                            "piece index '\(shown(hash.attribute("piece") ?? "(none)"))' of '\(file.name)' is missing, repeated or not below \(elements.count)"
                        )
                    }
                    slots[Int(index)] = try digest(hash, algorithm, "piece hash of '\(file.name)'")
                }
                let hashes = slots.compactMap { $0 }
                file.pieces.append(
                    try checked(MetalinkPieces(algorithm: algorithm, length: length, hashes: hashes), pieces, file))
            }
        }
        for resources in element.children("resources", in: ns) {
            for url in resources.children("url", in: ns) {
                let priority = try preferenceV3(url)
                let text = try urlText(url)
                let type = url.attribute("type").map(trimmed)?.lowercased()
                if type == "bittorrent" {
                    file.metaURLs.append(MetalinkMetaURL(url: text, mediaType: "torrent", priority: priority))
                } else {
                    file.urls.append(
                        MetalinkURL(url: text, priority: priority, location: location(url.attribute("location"))))
                }
            }
        }
        return ranked(file)
    }

    /// Metalink 3's `preference` (0–100, higher is better) as a Metalink 4 priority: 101 − preference.
    private static func preferenceV3(_ element: XMLElement) throws(MetalinkError) -> Int {
        guard let text = element.attribute("preference") else { return MetalinkURL.lowestPriority }
        guard let value = decimal(text), value <= 100 else {
            throw error(.invalidPriority, element, "preference '\(shown(text))' is not a number from 0 to 100")
        }
        return 101 - Int(value)
    }

    // MARK: - Shared rules

    private static func error(_ code: MetalinkError.Code, _ element: XMLElement, _ detail: String) -> MetalinkError {
        MetalinkError(code, line: element.line, column: element.column, detail)
    }

    /// XML white space (SP, TAB, LF, CR) removed from both ends.
    static func trimmed(_ text: String) -> String {
        let bytes = Array(text.utf8)
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
        guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) })
        else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    /// A non-negative decimal integer (surrounding white space allowed) that fits in an `Int64`, else `nil`.
    static func decimal(_ text: String) -> Int64? {
        let digits = trimmed(text).utf8
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var value: Int64 = 0
        for digit in digits {
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(Int64(digit - 0x30))
            if overflow1 || overflow2 { return nil }
            value = sum
        }
        return value
    }

    private static func shown(_ text: String) -> String { XMLReader.shown(text) }

    private static func fileName(_ element: XMLElement) throws(MetalinkError) -> String {
        guard let name = element.attribute("name") else {
            throw error(.missingField, element, "<file> has no name attribute")
        }
        if let problem = MetalinkFileName.problem(in: name) {
            throw error(.unsafeFileName, element, "file name '\(shown(name))' is refused: \(problem)")
        }
        return name
    }

    private static func size(_ file: XMLElement, _ ns: String) throws(MetalinkError) -> Int64? {
        guard let element = file.children("size", in: ns).first else { return nil }
        guard let value = decimal(element.text) else {
            throw error(
                .invalidSize, element,
                "size '\(shown(trimmed(element.text)))' is not a non-negative integer that fits in 64 bits")
        }
        return value
    }

    /// A whole-file `<hash type=…>`; unknown algorithms are ignored, a second equal hash of one algorithm too.
    private static func add(_ element: XMLElement, to hashes: inout [HashDigest], in name: String) throws(MetalinkError)
    {
        guard let algorithm = element.attribute("type").flatMap({ HashAlgorithm(name: trimmed($0)) }) else { return }
        let hash = try digest(element, algorithm, "hash of '\(name)'")
        if let existing = hashes.first(where: { $0.algorithm == algorithm }) {
            guard existing == hash else {
                throw error(.invalidHash, element, "'\(name)' has two different \(algorithm.rawValue) hashes")
            }
            return
        }
        hashes.append(hash)
    }

    private static func digest(_ element: XMLElement, _ algorithm: HashAlgorithm, _ what: String) throws(MetalinkError)
        -> HashDigest
    {
        do {
            return try HashDigest(algorithm: algorithm, hex: trimmed(element.text))
        } catch {
            throw Self.error(.invalidHash, element, "\(what): \(error.detail)")
        }
    }

    /// The algorithm of a `<pieces>`, `nil` (ignore the list) when it is one DownloadKit does not know.
    private static func pieceAlgorithm(_ pieces: XMLElement) throws(MetalinkError) -> HashAlgorithm? {
        guard let type = pieces.attribute("type") else {
            throw error(.missingField, pieces, "<pieces> has no type attribute")
        }
        return HashAlgorithm(name: trimmed(type))
    }

    private static func pieceLength(_ pieces: XMLElement) throws(MetalinkError) -> Int64 {
        guard let text = pieces.attribute("length") else {
            throw error(.missingField, pieces, "<pieces> has no length attribute")
        }
        guard let length = decimal(text), length > 0 else {
            throw error(
                .invalidPieceLength, pieces,
                "piece length '\(shown(text))' is not a positive integer that fits in 64 bits")
        }
        return length
    }

    /// Piece hashes must cover the file exactly: ⌈size ÷ length⌉ of them when the size is known, at least one otherwise.
    private static func checked(_ pieces: MetalinkPieces, _ element: XMLElement, _ file: MetalinkFile)
        throws(MetalinkError) -> MetalinkPieces
    {
        if let size = file.size {
            let expected = pieces.pieceCount(forSize: size)
            guard expected == pieces.hashes.count else {
                throw error(
                    .pieceCountMismatch, element,
                    "'\(file.name)' has \(pieces.hashes.count) \(pieces.algorithm.rawValue) piece hashes; \(size) bytes in pieces of \(pieces.length) make \(expected)"
                )
            }
        } else if pieces.hashes.isEmpty {
            throw error(
                .pieceCountMismatch, element,
                "'\(file.name)' has a \(pieces.algorithm.rawValue) piece list without hashes")
        }
        return pieces
    }

    private static func urlText(_ element: XMLElement) throws(MetalinkError) -> String {
        let text = trimmed(element.text)
        guard !text.isEmpty else { throw error(.missingField, element, "<\(element.localName)> holds no URL") }
        return text
    }

    /// A two-letter country code, lower-cased; anything else is dropped (a location is only a hint).
    private static func location(_ text: String?) -> String? {
        guard let text else { return nil }
        let bytes = Array(trimmed(text).utf8)
        guard bytes.count == 2, bytes.allSatisfy({ ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7A }) else { return nil }
        return String(decoding: bytes.map { $0 | 0x20 }, as: UTF8.self)
    }

    /// URLs and metadata URLs sorted best first; equal priorities keep document order.
    private static func ranked(_ file: MetalinkFile) -> MetalinkFile {
        var file = file
        file.urls = file.urls.enumerated().sorted {
            ($0.element.priority, $0.offset) < ($1.element.priority, $1.offset)
        }.map(\.element)
        file.metaURLs = file.metaURLs.enumerated().sorted {
            ($0.element.priority, $0.offset) < ($1.element.priority, $1.offset)
        }
        .map(\.element)
        return file
    }
}
