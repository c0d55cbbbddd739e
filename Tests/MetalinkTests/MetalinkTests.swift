import HTTPWire
import Testing
import TestThreads

@testable import DownloadKitMetalink

@Suite(.offPool) struct MetalinkTests {
    typealias S = MetalinkSamples

    static func digest(_ algorithm: HashAlgorithm, _ hex: String) -> HashDigest {
        try! HashDigest(algorithm: algorithm, hex: hex)
    }

    @Test func parsesMetalink4() throws {
        let metalink = try Metalink(parsing: S.v4)
        #expect(metalink.version == .v4)
        #expect(metalink.files.map(\.name) == ["distro-1.0.iso", "docs/README.txt"])
        let iso = metalink.files[0]
        #expect(iso.size == 1_000_000)
        #expect(iso.hashes == [Self.digest(.sha256, S.sha256Hello), Self.digest(.md5, S.md5Empty)])
        #expect(iso.strongestHash == Self.digest(.sha256, S.sha256Hello))
        #expect(iso.pieces.map(\.algorithm) == [.sha1, .sha256])
        #expect(iso.pieces[0].length == 262_144 && iso.pieces[0].hashes.count == 4)
        #expect(
            iso.strongestPieces?.hashes == [Self.digest(.sha256, S.sha256Empty), Self.digest(.sha256, S.sha256Hello)])
        #expect(
            iso.urls == [
                MetalinkURL(url: "https://mirror.example.com/distro/distro-1.0.iso", priority: 1, location: "us"),
                MetalinkURL(url: "http://ftp.example.de/pub/distro-1.0.iso", priority: 10, location: "de"),
                MetalinkURL(url: "http://jp.example.net/distro-1.0.iso?a=1&b=2", priority: 10, location: "jp"),
                MetalinkURL(url: "ftp://ftp.example.org/distro-1.0.iso"),
            ])
        #expect(iso.httpURLs.count == 3)
        #expect(
            iso.metaURLs == [
                MetalinkMetaURL(url: "http://example.org/distro-1.0.iso.torrent", mediaType: "torrent", priority: 2)
            ])
        #expect(iso.metaURLs.allSatisfy { !$0.isDownloadable })
        let readme = metalink.files[1]
        #expect(readme.size == 0 && readme.urls.map(\.location) == ["gb"])
    }

    @Test func parsesMetalink3IntoTheSameModel() throws {
        let metalink = try Metalink(parsing: S.v3)
        #expect(metalink.version == .v3)
        let tool = metalink.files[0]
        #expect(tool.name == "tool-2.3.tar.gz" && tool.size == 300_000)
        #expect(tool.hashes.map(\.algorithm) == [.md5, .sha1, .sha256])
        #expect(
            tool.pieces == [
                MetalinkPieces(
                    algorithm: .sha1, length: 131_072,
                    hashes: Array(repeating: Self.digest(.sha1, S.sha1Empty), count: 3))
            ])
        // preference p becomes priority 101 − p; none ranks last.
        #expect(
            tool.urls == [
                MetalinkURL(url: "http://us.example.com/tool-2.3.tar.gz", priority: 1, location: "us"),
                MetalinkURL(url: "ftp://ftp.example.se/tool-2.3.tar.gz", priority: 11, location: "se"),
                MetalinkURL(url: "http://slow.example.com/tool-2.3.tar.gz", priority: 101),
                MetalinkURL(
                    url: "https://fr.example.net/tool-2.3.tar.gz", priority: MetalinkURL.lowestPriority, location: "fr"),
            ])
        #expect(
            tool.metaURLs == [
                MetalinkMetaURL(url: "http://example.org/tool-2.3.tar.gz.torrent", mediaType: "torrent", priority: 1)
            ])
        #expect(metalink.files[1].size == nil && metalink.files[1].hashes.isEmpty)
    }

    @Test(arguments: [S.v4, S.v3])
    func writesMetalink4ThatReadsBackTheSameModel(_ document: String) throws {
        var metalink = try Metalink(parsing: document)
        let written = metalink.metalink4Document
        metalink.version = .v4
        #expect(try Metalink(parsing: written) == metalink)
        #expect(try Metalink(parsing: written).metalink4Document == written)
    }

    static func v4(_ body: String, name: String = "f") -> String {
        "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file name=\"\(name)\">\(body)</file></metalink>"
    }

    /// Documents that are well-formed XML but not a usable Metalink, each with the error that names it.
    @Test(
        arguments: [
            ("<metalink><file name=\"f\"/></metalink>", MetalinkError.Code.notMetalink),
            ("<m:metalink xmlns:m=\"urn:other\"/>", .notMetalink),
            ("<feed xmlns=\"urn:ietf:params:xml:ns:metalink\"/>", .notMetalink),
            ("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><published>x</published></metalink>", .noFiles),
            ("<metalink xmlns=\"http://www.metalinker.org/\"><files/></metalink>", .noFiles),
            ("<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file/></metalink>", .missingField),
            (v4("<size>-5</size>"), .invalidSize),
            (v4("<size>12x</size>"), .invalidSize),
            (v4("<size></size>"), .invalidSize),
            (v4("<size>9223372036854775808</size>"), .invalidSize),
            (v4("<size>99999999999999999999999</size>"), .invalidSize),
            (
                v4("<hash type=\"sha-256\">e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85g</hash>"),
                .invalidHash
            ),
            (v4("<hash type=\"sha-256\">e3b0c442</hash>"), .invalidHash),
            (v4("<hash type=\"md5\">\(S.sha1Empty)</hash>"), .invalidHash),
            (
                v4("<hash type=\"md5\">\(S.md5Empty)</hash><hash type=\"MD5\">00000000000000000000000000000000</hash>"),
                .invalidHash
            ),
            (
                v4(
                    "<size>10</size><pieces length=\"4\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash><hash>\(S.sha1Empty)</hash></pieces>"
                ), .pieceCountMismatch
            ),
            (
                v4(
                    "<size>8</size><pieces length=\"4\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash><hash>\(S.sha1Empty)</hash><hash>\(S.sha1Empty)</hash></pieces>"
                ), .pieceCountMismatch
            ),
            (v4("<pieces length=\"4\" type=\"sha-1\"></pieces>"), .pieceCountMismatch),
            (
                v4("<size>0</size><pieces length=\"4\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces>"),
                .pieceCountMismatch
            ),
            (v4("<pieces length=\"0\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces>"), .invalidPieceLength),
            (v4("<pieces length=\"-1\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces>"), .invalidPieceLength),
            (
                v4("<pieces length=\"99999999999999999999\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces>"),
                .invalidPieceLength
            ),
            (v4("<pieces type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces>"), .missingField),
            (v4("<pieces length=\"4\"><hash>\(S.sha1Empty)</hash></pieces>"), .missingField),
            (v4("<pieces length=\"4\" type=\"sha-1\"><hash>xyz</hash></pieces>"), .invalidHash),
            (v4("<url priority=\"0\">http://a/f</url>"), .invalidPriority),
            (v4("<url priority=\"1000000\">http://a/f</url>"), .invalidPriority),
            (v4("<url priority=\"high\">http://a/f</url>"), .invalidPriority),
            (v4("<url>  </url>"), .missingField),
            (v4("<metaurl>http://a/f.torrent</metaurl>"), .missingField),
            (
                "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\"><file name=\"a\"/><file name=\"b\"/><file name=\"a\"/></metalink>",
                .duplicateFileName
            ),
            (
                "<metalink xmlns=\"http://www.metalinker.org/\"><files><file name=\"f\"><resources><url preference=\"101\">http://a/f</url></resources></file></files></metalink>",
                .invalidPriority
            ),
            (v3Pieces(size: 8, ["0", "0"]), .invalidPieceIndex),
            (v3Pieces(size: 8, ["0", "2"]), .invalidPieceIndex),
            (v3Pieces(size: 8, ["0", nil]), .invalidPieceIndex),
            (v3Pieces(size: 8, ["1", "-1"]), .invalidPieceIndex),
            (v3Pieces(size: 12, ["1", "0"]), .pieceCountMismatch),
        ] as [(String, MetalinkError.Code)])
    func refusesUnusableMetalinks(_ document: String, _ code: MetalinkError.Code) {
        #expect {
            try Metalink(parsing: document)
        } throws: { error in
            guard let error = error as? MetalinkError else { return false }
            return error.code == code && error.line != nil && error.column != nil
        }
    }

    static func v3Pieces(size: Int, _ indexes: [String?]) -> String {
        let hashes = indexes.map { index in
            "<hash\(index.map { " piece=\"\($0)\"" } ?? "")>\(S.sha1Empty)</hash>"
        }.joined()
        return """
            <metalink xmlns="http://www.metalinker.org/"><files><file name="f"><size>\(size)</size><verification>\
            <pieces length="4" type="sha1">\(hashes)</pieces></verification></file></files></metalink>
            """
    }

    @Test func piecesWithoutSizeAndUnknownAlgorithmsAreKeptOrIgnored() throws {
        let file = try #require(
            Metalink(
                parsing: Self.v4(
                    "<pieces length=\"4\" type=\"sha-1\"><hash>\(S.sha1Empty)</hash></pieces><hash type=\"ed2k\">x</hash><pieces length=\"q\" type=\"tiger\"/>"
                )
            ).files.first)
        #expect(file.pieces.count == 1 && file.hashes.isEmpty && file.size == nil)
    }

    /// Names that would escape the download directory, hide a file or mislead, each refused and named.
    @Test(arguments: [
        "", "/etc/passwd", "../evil", "a/../../evil", "a/..", "..", ".", "./a", "a//b", "a/", "dir\\..\\evil",
        ".bashrc", "a/.ssh/authorized_keys", " lead", "trail ", "trail.", "a\u{202E}fdp.exe", "a\u{200F}b", "a\u{85}b",
        "x.dkpart", "X.DKRESUME.tmp", String(repeating: "a", count: 256), String(repeating: "a/", count: 2048) + "a",
    ])
    func refusesUnsafeNames(_ name: String) throws {
        #expect(MetalinkFileName.problem(in: name) != nil)
        let escaped = name.replacing("&", with: "&amp;").replacing("\"", with: "&quot;")
        #expect {
            try Metalink(parsing: Self.v4("", name: escaped))
        } throws: { error in
            (error as? MetalinkError)?.code == .unsafeFileName && "\(error)".contains("refused")
        }
    }

    @Test(arguments: [
        "a", "dir/sub/file.iso", "caf\u{E9} (1).txt", "a..b", "a.b/c-d_e", "x.dk", "日本語/ファイル.zip",
        String(repeating: "a", count: 255),
    ])
    func acceptsSafeNames(_ name: String) throws {
        #expect(MetalinkFileName.problem(in: name) == nil)
        #expect(try Metalink(parsing: Self.v4("", name: name)).files[0].name == name)
    }

    @Test func controlCharacterNamesFromReferencesAreRefused() {
        for reference in ["&#9;", "&#x1b;", "&#x7F;", "&#10;"] {
            #expect(throws: MetalinkError.self) { try Metalink(parsing: Self.v4("", name: "a\(reference)b")) }
        }
    }
}

@Suite(.offPool) struct MetalinkSizeTests {
    /// The limits' stated reason holds: a 100 GiB file in 1 MiB pieces (102,400 SHA-256 piece hashes, ~7.5 MB of
    /// document) is inside every default limit.
    @Test func aHundredGiBFileInMiBPiecesFitsTheDefaults() throws {
        let size: Int64 = 100 << 30
        let hash = "<hash>\(MetalinkSamples.sha256Empty)</hash>\n"
        let document = """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="big.img"><size>\(size)</size>\
            <pieces length="1048576" type="sha-256">
            \(String(repeating: hash, count: 102_400))</pieces><url>http://a/big.img</url></file></metalink>
            """
        #expect(document.utf8.count < MetalinkLimits.default.maxBytes)
        let file = try #require(Metalink(parsing: document).files.first)
        #expect(file.pieces.first?.hashes.count == 102_400)
    }
}
