import Foundation
import Testing
import TestOrigin
import TestThreads

@_spi(DownloadKitInternal) @testable import DownloadKit

@Suite(.offPool) struct ResumeInfoTests {
    static func fullInfo() -> ResumeInfo {
        ResumeInfo(
            originalURL: "https://example.com/downloads/big.iso",
            currentURL: "https://cdn.example.com/signed/big.iso?sig=abc123&exp=1700000000",
            tempFilePath: "/var/tmp/downloads/big.iso.dkpart",
            bytesReceived: 4_194_304,
            entityTag: "W/\"5f1b-3a2c9d\"",
            lastModified: "Tue, 14 Nov 2023 08:00:00 GMT",
            destinationPath: "/home/user/Downloads/big.iso",
            fileName: "big.iso",
            totalLength: 16_777_216,
            acceptsRanges: true,
            checksum: ResumeChecksum(algorithm: "sha-256", expectedHex: "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"),
            segments: [
                ResumeSegment(start: 0, end: 8_388_608, written: 4_194_304),
                ResumeSegment(start: 8_388_608, end: 16_777_216, written: 1_048_576),
            ],
            created: Date(timeIntervalSince1970: 1_699_948_805),
            updated: Date(timeIntervalSince1970: 1_699_949_000)
        )
    }

    /// The full info as a mutable Foundation dictionary, for building hostile variants.
    static func plist(_ change: (inout [String: Any]) -> Void) throws -> Data {
        let encoded = try fullInfo().encoded(format: .xml)
        var dictionary = try #require(try PropertyListSerialization.propertyList(from: encoded, options: [], format: nil) as? [String: Any])
        change(&dictionary)
        return try PropertyListSerialization.data(fromPropertyList: dictionary, format: .binary, options: 0)
    }

    static func failure(_ data: Data) -> ResumeInfoError? {
        do {
            _ = try ResumeInfo.decode(data)
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: [PropertyListFormat.binary, .xml])
    func fullInfoRoundTrips(format: PropertyListFormat) throws {
        let info = Self.fullInfo()
        let data = try info.encoded(format: format)
        #expect(data.starts(with: Array((format == .binary ? "bplist00" : "<?xml").utf8)))
        #expect(try ResumeInfo.decode(data) == info)
    }

    /// The binary writer is our own (BinaryPropertyList); Foundation's reader is the oracle that it writes
    /// real `bplist00`: every width of integer, count and reference, non-ASCII text, and 300 segments
    /// (over 255 objects, so two-byte references; over 15 elements, so counts after the marker).
    @Test func binaryPlistsAreReadByFoundationAsTheXMLOnesAre() throws {
        var info = Self.fullInfo()
        info.fileName = "résumé – 履歴書.iso"
        info.totalLength = 1 << 50
        info.segments = (0..<300).map { ResumeSegment(start: Int64($0) << 32, end: (Int64($0) + 1) << 32, written: Int64($0) * 70_000) }
        let binary = try info.encoded(format: .binary)
        let xml = try info.encoded(format: .xml)
        let fromBinary = try PropertyListSerialization.propertyList(from: binary, options: [], format: nil) as? NSDictionary
        let fromXML = try PropertyListSerialization.propertyList(from: xml, options: [], format: nil) as? NSDictionary
        #expect(fromBinary != nil)
        #expect(fromBinary == fromXML)
        #expect(try ResumeInfo.decode(binary) == info)
        for value: ArchiveValue in [.integer(-5), .integer(0), .integer(255), .integer(256), .integer(65_536), .integer(Int64.max), .real(-0.5), .bool(false), .data(Data(repeating: 7, count: 20)), .array([])] {
            let bytes = BinaryPropertyList.encode(.array([value]))
            let decoded = try PropertyListSerialization.propertyList(from: bytes, options: [], format: nil)
            let asRead = try PropertyListSerialization.data(fromPropertyList: decoded, format: .xml, options: 0)
            let expected = try PropertyListSerialization.data(fromPropertyList: [value.propertyListObject], format: .xml, options: 0)
            #expect(asRead == expected, "\(value)")
        }
    }

    @Test func minimalInfoRoundTripsWithOptionalKeysAbsent() throws {
        let info = ResumeInfo(
            originalURL: "http://h/x",
            tempFilePath: "/tmp/x.part",
            created: Date(timeIntervalSinceReferenceDate: 1000)
        )
        #expect(info.tempFileName == "x.part")
        #expect(info.currentURL == "http://h/x")
        let data = try info.encoded()
        let plist = try #require(try PropertyListSerialization.propertyList(from: data, options: [], format: nil) as? [String: Any])
        #expect(plist["NSURLSessionResumeEntityTag"] == nil)
        #expect(plist["DownloadKitTotalLength"] == nil)
        #expect(plist["NSURLSessionResumeInfoVersion"] as? Int == 2)
        #expect(plist["DownloadKitFormatVersion"] as? Int == 1)
        #expect(try ResumeInfo.decode(data) == info)
    }

    @Test func unknownSegmentEndRoundTripsAsMinusOne() throws {
        var info = Self.fullInfo()
        info.totalLength = nil
        info.segments = [ResumeSegment(start: 0, end: 100, written: 100), ResumeSegment(start: 100, end: nil, written: 7)]
        let data = try info.encoded()
        let plist = try #require(try PropertyListSerialization.propertyList(from: data, options: [], format: nil) as? [String: Any])
        let segments = try #require(plist["DownloadKitSegments"] as? [[String: Any]])
        #expect(segments.last?["end"] as? Int == -1)
        #expect(try ResumeInfo.decode(data) == info)
    }

    @Test func datesAreStoredAtOneSecondResolution() throws {
        var info = Self.fullInfo()
        info.updated = Date(timeIntervalSinceReferenceDate: 12.75)
        let decoded = try ResumeInfo.decode(info.encoded())
        #expect(decoded.updated == Date(timeIntervalSinceReferenceDate: 12))
    }

    /// Fuzzer finding (CI, stop 27, `resumeinfo` seed 1): a record dated 8.4 × 10⁸⁵ s decoded, but its XML
    /// re-encoding could not say that date. Dates outside 1970–9999 are refused with a typed error naming
    /// the key, on decode and on encode.
    @Test func aDateBeyondTheYear9999IsRefused() throws {
        let data = try Self.plist { $0["DownloadKitCreated"] = Date(timeIntervalSinceReferenceDate: 8.356e85) }
        let error = try #require(Self.failure(data))
        #expect(error.code == .invalidValue && error.key == "DownloadKitCreated", "\(error)")
        var info = Self.fullInfo()
        info.updated = Date(timeIntervalSince1970: -1)
        #expect(throws: ResumeInfoError.self) { _ = try info.encoded(format: .xml) }
    }

    @Test func checkedInVersion1FixtureStillDecodes() throws {
        let info = try ResumeInfo.decode(ResumeFixtures.data("downloadkit-v1"))
        #expect(info.origin == .downloadKit)
        #expect(info.originalURL == "https://example.com/downloads/big.iso")
        #expect(info.currentURL == "https://cdn.example.com/signed/big.iso?sig=abc123&exp=1700000000")
        #expect(info.bytesReceived == 4_194_304)
        #expect(info.entityTag == "\"5f1b-3a2c9d\"")
        #expect(info.lastModified == "Tue, 14 Nov 2023 08:00:00 GMT")
        #expect(info.tempFileName == "big.iso.dkpart")
        #expect(info.tempFilePath == "/var/tmp/downloads/big.iso.dkpart")
        #expect(info.destinationPath == "/home/user/Downloads/big.iso")
        #expect(info.fileName == "big.iso")
        #expect(info.totalLength == 16_777_216)
        #expect(info.acceptsRanges == true)
        #expect(info.checksum?.algorithm == "sha-256")
        #expect(info.segments.count == 2)
        #expect(info.segments[1] == ResumeSegment(start: 8_388_608, end: 16_777_216, written: 1_048_576))
        #expect(info.created == Date(timeIntervalSince1970: 1_699_948_805))
        #expect(info.updated == Date(timeIntervalSince1970: 1_699_949_000))
    }

    @Test func hostileValuesGiveTypedErrorsNamingTheKey() throws {
        let cases: [(String, (inout [String: Any]) -> Void, ResumeInfoError.Code, String?)] = [
            ("wrong type", { $0["NSURLSessionResumeBytesReceived"] = "4194304" }, .invalidValue, "NSURLSessionResumeBytesReceived"),
            ("bool for integer", { $0["DownloadKitTotalLength"] = true }, .invalidValue, "DownloadKitTotalLength"),
            ("negative", { $0["NSURLSessionResumeBytesReceived"] = -5 }, .invalidValue, "NSURLSessionResumeBytesReceived"),
            ("absurd", { $0["DownloadKitTotalLength"] = Int.max }, .invalidValue, "DownloadKitTotalLength"),
            ("beyond total", { $0["NSURLSessionResumeBytesReceived"] = 16_777_217 }, .invalidValue, "NSURLSessionResumeBytesReceived"),
            ("missing key", { $0["DownloadKitOriginalURL"] = nil }, .missingKey, "DownloadKitOriginalURL"),
            ("missing date", { $0["DownloadKitCreated"] = nil }, .missingKey, "DownloadKitCreated"),
            ("future version", { $0["DownloadKitFormatVersion"] = 2 }, .unsupportedVersion, "DownloadKitFormatVersion"),
            ("traversal", { $0["NSURLSessionResumeInfoTempFileName"] = "../../.ssh/authorized_keys" }, .invalidValue, "NSURLSessionResumeInfoTempFileName"),
            ("relative path", { $0["NSURLSessionResumeInfoLocalPath"] = "big.part" }, .invalidValue, "NSURLSessionResumeInfoLocalPath"),
            ("unsafe file name", { $0["DownloadKitFileName"] = ".bashrc" }, .invalidValue, "DownloadKitFileName"),
            ("non-http URL", { $0["NSURLSessionDownloadURL"] = "file:///etc/passwd" }, .invalidValue, "NSURLSessionDownloadURL"),
            ("giant string", { $0["NSURLSessionResumeEntityTag"] = String(repeating: "x", count: 100_000) }, .tooLarge, "NSURLSessionResumeEntityTag"),
            ("huge string", { $0["NSURLSessionResumeEntityTag"] = String(repeating: "x", count: 300_000) }, .tooLarge, nil),
            ("control chars", { $0["NSURLSessionResumeEntityTag"] = "\"a\r\nSet-Cookie: x\"" }, .invalidValue, "NSURLSessionResumeEntityTag"),
            ("half checksum", { $0["DownloadKitChecksumExpected"] = nil }, .missingKey, "DownloadKitChecksumExpected"),
            ("bad hex", { $0["DownloadKitChecksumExpected"] = "xyz" }, .invalidValue, "DownloadKitChecksumExpected"),
            ("segments not array", { $0["DownloadKitSegments"] = "0-10" }, .invalidValue, "DownloadKitSegments"),
            ("segment not dict", { $0["DownloadKitSegments"] = [5] }, .invalidValue, "DownloadKitSegments"),
            ("overlap", {
                $0["DownloadKitSegments"] = [["start": 0, "end": 100, "written": 0], ["start": 50, "end": 200, "written": 0]]
            }, .invalidValue, "DownloadKitSegments"),
            ("beyond total segment", {
                $0["DownloadKitSegments"] = [["start": 0, "end": 16_777_217, "written": 0]]
            }, .invalidValue, "DownloadKitSegments"),
            ("written past end", {
                $0["DownloadKitSegments"] = [["start": 0, "end": 10, "written": 11]]
            }, .invalidValue, "DownloadKitSegments"),
            ("unknown end with total", {
                $0["DownloadKitSegments"] = [["start": 0, "end": -1, "written": 0]]
            }, .invalidValue, "DownloadKitSegments"),
            ("negative segment", {
                $0["DownloadKitSegments"] = [["start": -10, "end": 10, "written": 0]]
            }, .invalidValue, "DownloadKitSegments"),
            ("too many segments", {
                $0["DownloadKitSegments"] = Array(repeating: ["start": 0, "end": 1, "written": 0], count: 70_000)
            }, .tooLarge, nil),
        ]
        for (name, change, code, key) in cases {
            let error = Self.failure(try Self.plist(change))
            #expect(error?.code == code, "\(name): \(String(describing: error))")
            if let key { #expect(error?.key == key, "\(name): \(String(describing: error))") }
        }
    }

    @Test func bytesThatAreNotAResumePlistAreRejected() throws {
        var generator = SystemRandomNumberGenerator()
        let random = Data((0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let binary = try Self.fullInfo().encoded()
        let inputs: [(String, Data, ResumeInfoError.Code)] = [
            ("empty", Data(), .notAPropertyList),
            ("random", random, .notAPropertyList),
            ("truncated binary", binary.prefix(binary.count / 2), .notAPropertyList),
            ("truncated XML", try Self.fullInfo().encoded(format: .xml).prefix(300), .notAPropertyList),
            ("array root", try PropertyListSerialization.data(fromPropertyList: [1, 2], format: .binary, options: 0), .notAPropertyList),
            ("unrelated dictionary", try PropertyListSerialization.data(fromPropertyList: ["a": 1], format: .xml, options: 0), .missingKey),
            ("oversized", Data(count: 5 * 1024 * 1024), .tooLarge),
        ]
        for (name, data, code) in inputs {
            #expect(Self.failure(data)?.code == code, "\(name)")
        }
    }

    @Test func encodingRefusesValuesDecodingWouldReject() {
        var info = Self.fullInfo()
        info.bytesReceived = -1
        #expect { try info.encoded() } throws: { ($0 as? ResumeInfoError)?.key == "NSURLSessionResumeBytesReceived" }
        info = Self.fullInfo()
        info.tempFileName = "a/b"
        #expect { try info.encoded() } throws: { ($0 as? ResumeInfoError)?.code == .invalidValue }
    }

    @Test func atomicWriteLeavesNoTemporaryFileAndReadsBack() throws {
        let directory = FileManager.default.temporaryDirectory.path + "/dk-resume-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/big.iso.dkresume"

        var info = Self.fullInfo()
        try info.write(to: path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["big.iso.dkresume"])
        #expect(try ResumeInfo.read(from: path) == info)

        info.bytesReceived = 8_388_608
        info.segments[0].written = 8_388_608
        try info.write(to: path, format: .xml)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["big.iso.dkresume"])
        #expect(try ResumeInfo.read(from: path) == info)
    }

    @Test func writeFailuresReportErrnoAndLeaveNothingBehind() throws {
        let directory = FileManager.default.temporaryDirectory.path + "/dk-resume-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        #expect { try Self.fullInfo().write(to: directory + "/missing/x.dkresume") } throws: { error in
            let error = error as? ResumeInfoError
            return error?.code == .ioFailed && error?.errorNumber == .noSuchFile
        }
        // Renaming a file over a non-empty directory fails after the temp file was written: it must be removed.
        try FileManager.default.createDirectory(atPath: directory + "/occupied/child", withIntermediateDirectories: true)
        #expect { try Self.fullInfo().write(to: directory + "/occupied") } throws: { ($0 as? ResumeInfoError)?.code == .ioFailed }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["occupied"])

        #expect { try ResumeInfo.read(from: directory + "/absent") } throws: { ($0 as? ResumeInfoError)?.errorNumber == .noSuchFile }
    }

    @Test func readRefusesFilesLargerThanTheLimit() throws {
        let path = FileManager.default.temporaryDirectory.path + "/dk-resume-big-\(UUID().uuidString)"
        #expect(FileManager.default.createFile(atPath: path, contents: Data(count: ResumeInfo.maxFileBytes + 1)))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect { try ResumeInfo.read(from: path) } throws: { ($0 as? ResumeInfoError)?.code == .tooLarge }
    }

    @Test func formatDocumentNamesEveryKey() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let document = try String(contentsOf: root.appendingPathComponent("docs/RESUME-INFO.md"), encoding: .utf8)
        for key in ResumeInfoKey.allCases {
            #expect(document.contains("`\(key.rawValue)`"), "docs/RESUME-INFO.md does not document \(key.rawValue)")
        }
        for fixture in ["apple-v1.xml.plist", "apple-v2.xml.plist", "apple-v2.binary.plist", "apple-v4.keyed.plist", "downloadkit-v1.plist"] {
            #expect(document.contains(fixture), "docs/RESUME-INFO.md does not describe \(fixture)")
        }
    }
}

/// The field checks every record passes on the way in and out: an ASCII fast path in front of the
/// Unicode property lookups must decide exactly as they do.
@Suite(.offPool) struct ResumeInfoFieldCheckTests {
    static func urlPasses(_ url: String) -> Bool { (try? ResumeInfo.checkHTTPURL(url, key: .downloadURL)) != nil }
    static func textPasses(_ text: String) -> Bool { (try? ResumeInfo.checkText(text, key: .entityTag)) != nil }

    @Test func urls() {
        for good in ["http://x", "HTTP://x", "hTtPs://x/a?b=c#d", "https://[::1]:8443/", "http://h/\u{E9}t\u{E9}"] {
            #expect(Self.urlPasses(good), "\(good)")
        }
        for bad in [
            "http://", "https://", "ftp://x", "http:/x", "httpx://x", "", "http://a b", "http://a\tb", "http://a\nb",
            "http://a\u{3000}b", "http://a\u{A0}b", "http://a\u{0}b", "\u{130}ttp://x",
        ] {
            #expect(!Self.urlPasses(bad), "\(bad.debugDescription)")
        }
    }

    @Test func text() {
        for good in ["\"abc\"", "W/\"x\"", "a\tb", "", "\u{E9}\u{1F600}", "Thu, 26 Nov 2026 07:25:55 GMT", "~"] {
            #expect(Self.textPasses(good), "\(good.debugDescription)")
        }
        for bad in ["a\u{0}b", "a\nb", "a\rb", "\u{7F}", "a\u{85}b", "a\u{9F}", "\u{1B}[0m"] {
            #expect(!Self.textPasses(bad), "\(bad.debugDescription)")
        }
    }
}

@Suite(.offPool) struct ResumeInfoStaleTemporaryFileTests {
    @Test func temporaryFilesOfDeadWritersAreRemovedAndLiveOnesKept() throws {
        let dir = try ScratchDirectory()
        let path = dir.file("x.dkresume")
        // A pid far above pid_max cannot exist; our own pid is alive.
        #expect(FileManager.default.createFile(atPath: path + ".tmp-2147483000", contents: Data([1])))
        #expect(FileManager.default.createFile(atPath: path + ".tmp-\(getpid())", contents: Data([2])))
        #expect(FileManager.default.createFile(atPath: dir.file("other.dkresume.tmp-2147483000"), contents: Data([3])))
        // Names that only look like a temporary file of this path are not ours to remove.
        let lookalikes = ["x.dkresume.tmp-", "x.dkresume.tmp-12ab", "x.dkresume.tmp-99999999999", "x.dkresume.tmp-0", "x.dkresume.tmp--5"]
        for name in lookalikes { #expect(FileManager.default.createFile(atPath: dir.file(name), contents: Data([4]))) }
        ResumeInfo.removeStaleTemporaryFiles(for: path)
        #expect(dir.contents == (["other.dkresume.tmp-2147483000", "x.dkresume.tmp-\(getpid())"] + lookalikes).sorted())
    }

    /// A run killed while it wrote its first record, before any body byte, leaves an empty partial and the
    /// record's temporary file (no record file): the next run sweeps it too (seen once in CI's chaos run,
    /// where the last run's success left `file.bin.dkresume.tmp-<pid>` beside the file).
    @Test func theRunAfterOneKilledBeforeItsFirstByteRemovesItsTemporaryRecord() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/f", .resource(Resource(size: 200_000, seed: 77)))
        let dir = try ScratchDirectory()
        let destination = dir.file("f.bin")
        let working = WorkingFiles(besideFile: destination)
        #expect(FileManager.default.createFile(atPath: working.partial, contents: Data()))
        // A pid far above pid_max: its writer is gone.
        #expect(FileManager.default.createFile(atPath: working.resumeInfo + ".tmp-2147483000", contents: Data()))
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/f"), destination: .file(destination)))
        #expect(try result.get().bytes == 200_000)
        #expect(dir.contents == ["f.bin"])
        #expect(fileMatchesPattern(destination, size: 200_000, seed: 77))
    }
}
