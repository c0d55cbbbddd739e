import Foundation
import HTTPWire
import Testing

@testable import DownloadKit

@Suite struct FileNamingTests {
    @Test(arguments: [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\win.ini", "win.ini"),
        ("/etc/shadow", "shadow"),
        (".bashrc", "bashrc"),
        ("a\u{0}b", "ab"),
        ("a\nb\tc\u{7F}d", "abcd"),
        ("CON", "CON"),
        ("invoice\u{202E}fdp.exe", "invoicefdp.exe"),
        ("report. . ", "report"),
        ("  spaced name.txt", "spaced name.txt"),
        ("日本語ファイル.pdf", "日本語ファイル.pdf"),
        ("e\u{301}te\u{301}.txt", "\u{E9}t\u{E9}.txt"),
    ])
    func sanitizingHostileNamesKeepsOnlyASafeComponent(proposed: String, expected: String) {
        #expect(FileNaming.sanitizedFileName(proposed) == expected)
    }

    @Test(arguments: ["", ".", "..", "...", " . . ", "dir/", "\\", "\u{202E}\u{0}", "../.."])
    func namesWithNothingUsableLeftAreRejected(proposed: String) {
        #expect(FileNaming.sanitizedFileName(proposed) == nil)
    }

    /// The name a response suggests, as the engine hands it to the machine with the head: the
    /// Content-Disposition file name, else the URL's last path segment, each sanitised (NFC included); nil
    /// when neither gives a usable name.
    @Test(arguments: [
        ("http://h/files/disk.iso", [("Content-Disposition", "attachment; filename=\"report.pdf\"")], "report.pdf"),
        ("http://h/files/disk.iso", [], "disk.iso"),
        ("http://h/files/disk.iso", [("Content-Disposition", "attachment; filename=\"../../etc/passwd\"")], "passwd"),
        ("http://h/files/disk.iso", [("Content-Disposition", "attachment; filename=\"..\"")], "disk.iso"),
        ("http://h/files/disk.iso", [("Content-Disposition", "attachment; filename*=UTF-8''e%CC%81te%CC%81.txt")], "\u{E9}t\u{E9}.txt"),
        ("http://h/files/e%CC%81.bin", [], "\u{E9}.bin"),
        ("http://h/files/x.dkpart", [], "x_dkpart"),
        ("http://h/", [], nil),
        ("http://h/", [("Content-Disposition", "attachment")], nil),
    ] as [(String, [(String, String)], String?)])
    func aResponseSuggestsASanitisedName(url: String, fields: [(String, String)], expected: String?) throws {
        let head = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders(fields))
        #expect(FileNaming.suggestedFileName(for: head, at: try HTTPURL(url)) == expected)
    }

    @Test func longNamesAreCutToNameMaxBytesOnCharacterBoundariesKeepingTheExtension() throws {
        let proposed = String(repeating: "é", count: 150) + ".pdf"
        #expect(proposed.utf8.count == 304)
        let name = try #require(FileNaming.sanitizedFileName(proposed))
        #expect(name.utf8.count <= FileNaming.maxNameBytes)
        #expect(name.hasSuffix(".pdf"))
        #expect(name.dropLast(4).allSatisfy { $0 == "é" })

        let family = "👨‍👩‍👧‍👦"
        let emoji = String(repeating: family, count: 12)
        #expect(emoji.utf8.count == 300)
        let cut = try #require(FileNaming.sanitizedFileName(emoji))
        #expect(cut.utf8.count <= FileNaming.maxNameBytes)
        #expect(cut.utf8.count % family.utf8.count == 0)
        #expect(cut.allSatisfy { $0 == Character(family) })
    }

    @Test func fileNameUsesTheSanitizedFileIDOrTheURLDigestPlusASafeExtension() {
        let md5: (String) -> String = { $0 == "https://e.com/v/clip.mp4" ? "0123456789abcdef0123456789abcdef" : "ffff" }
        #expect(
            FileNaming.fileName(forURL: "https://e.com/v/clip.mp4", pathExtension: "mp4", fileID: nil, md5Hex: md5)
                == "0123456789abcdef0123456789abcdef.mp4"
        )
        #expect(FileNaming.fileName(forURL: "https://e.com/v/clip.mp4", pathExtension: "mp4", fileID: "lesson-7", md5Hex: md5) == "lesson-7.mp4")
        #expect(FileNaming.fileName(forURL: "https://e.com/v/clip.mp4", pathExtension: "mp4", fileID: "../../x", md5Hex: md5) == "x.mp4")
        #expect(FileNaming.fileName(forURL: "https://e.com/v/clip.mp4", pathExtension: "mp4", fileID: "movie.MP4", md5Hex: md5) == "movie.MP4")
        #expect(FileNaming.fileName(forURL: "https://e.com/a", pathExtension: "php?x=/../", fileID: nil, md5Hex: md5) == "ffff")
        #expect(FileNaming.fileName(forURL: "https://e.com/a", pathExtension: nil, fileID: "..", md5Hex: md5) == "ffff")
        #expect(FileNaming.fileName(forURL: "https://e.com/a", pathExtension: nil, fileID: nil, md5Hex: { _ in "../" }) == "download")
    }

    @Test func containmentFollowsSymlinksAndRejectsEscapes() throws {
        let base = FileManager.default.temporaryDirectory.path + "/dk-naming-\(UUID().uuidString)"
        let directory = base + "/root"
        try FileManager.default.createDirectory(atPath: directory + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/rootx", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory + "/escape", withDestinationPath: "/etc")
        try FileManager.default.createSymbolicLink(atPath: directory + "/inner", withDestinationPath: directory + "/sub")
        defer { try? FileManager.default.removeItem(atPath: base) }

        #expect(FileNaming.isContained("file.bin", in: directory))
        #expect(FileNaming.isContained("sub/new/file.bin", in: directory))
        #expect(FileNaming.isContained(directory + "/./sub/file.bin", in: directory))
        #expect(FileNaming.isContained(directory, in: directory))
        #expect(FileNaming.isContained("inner/file.bin", in: directory))
        #expect(!FileNaming.isContained("../rootx/file.bin", in: directory))
        #expect(!FileNaming.isContained(base + "/rootx/file.bin", in: directory))
        #expect(!FileNaming.isContained("sub/../../file.bin", in: directory))
        #expect(!FileNaming.isContained("/etc/passwd", in: directory))
        #expect(!FileNaming.isContained("escape/passwd", in: directory))
        #expect(!FileNaming.isContained("a\u{0}b", in: directory))
        #expect(!FileNaming.isContained("file.bin", in: base + "/missing"))
    }
}

/// Regressions found by Fuzz/FuzzFileNames.swift (inputs in Fuzz/regressions/filenames/): separators
/// and dots hidden inside grapheme clusters.
@Suite struct FileNamingGraphemeRegressionTests {
    @Test(arguments: [
        "\u{0600}/../\u{0301}x",
        "/\u{06DA}",
        ".\u{0329}in.ini",
        "a/\u{0301}b",
        "..\u{0301}/x",
    ])
    func sanitisedNamesNeverHoldSeparatorsOrLeadingDotsAtTheScalarLevel(_ proposed: String) throws {
        let name = try #require(FileNaming.sanitizedFileName(proposed))
        #expect(!name.unicodeScalars.contains("/"))
        #expect(!name.unicodeScalars.contains("\\"))
        #expect(name.unicodeScalars.first != ".")
        #expect(!name.utf8.elementsEqual("..".utf8))
        #expect(FileNaming.sanitizedFileName(name) == name)
    }

    @Test func containmentComparesBytesNotCharacters() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dk-naming-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(FileNaming.isContained(directory + "/\u{06DA}x", in: directory))
        #expect(FileNaming.isContained(directory + "//\u{06DA}x", in: directory))
        #expect(!FileNaming.isContained(directory + "/../x", in: directory))
        // A sibling whose name is the NFD spelling of the directory's NFC name is not inside it.
        let nfc = directory + "/caf\u{E9}"
        try FileManager.default.createDirectory(atPath: nfc, withIntermediateDirectories: true)
        #expect(!FileNaming.isContained(directory + "/cafe\u{301}/x", in: nfc))
    }
}
