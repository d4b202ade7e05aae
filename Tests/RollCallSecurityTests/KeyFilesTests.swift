import Foundation
import RollCallCore
import RollCallSecurity
import Testing
import ZeroMQ

@Suite("Keys, certificates and the authorized-keys table")
struct KeyFilesTests {
    /// A pair libzmq makes is written in czmq's format and read back unchanged; its public key is the secret's.
    @Test func keyPairRoundTripsThroughACertificate() throws {
        let pair = try Curve.keyPair()
        let publicKey = try #require(CurveKey(pair.publicKey))
        let secretKey = try #require(CurveKey(pair.secretKey))
        let certificate = Certificate(publicKey: publicKey, secretKey: secretKey)
        #expect(try Certificate(zpl: certificate.zpl) == certificate)
        #expect(try Curve.publicKey(ofSecret: pair.secretKey) == pair.publicKey)
        let publicOnly = Certificate(publicKey: certificate.publicKey, secretKey: nil)
        #expect(try Certificate(zpl: publicOnly.zpl) == publicOnly)
        #expect(!publicOnly.zpl.contains("secret-key"))
    }

    /// A certificate as czmq's zcert writes it (comments, a metadata section with entries, quoted values, a key
    /// with '#' and '=' in it) is read.
    @Test func czmqCertificateIsRead() throws {
        let text = """
            #   ****  Generated on 2026-11-24 04:00:00 by CZMQ  ****
            #   ZeroMQ CURVE **Secret** Certificate
            #   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.

            metadata
                name = "alice's phone"
                organisation = 'seed'
            curve
                public-key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
                secret-key = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOT#JR=cs#"
            """
        let certificate = try Certificate(zpl: text)
        #expect(certificate.publicKey.z85 == "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID")
        #expect(certificate.secretKey?.z85 == "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOT#JR=cs#")
        // A certificate saved with CRLF line ends reads the same.
        #expect(try Certificate(zpl: text.replacingOccurrences(of: "\n", with: "\r\n")) == certificate)
    }

    /// Malformed certificates are errors that name the line: no public key, a short key, an unclosed quote, bad
    /// indentation.
    @Test(arguments: [
        ("curve\n    secret-key = \"D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs\"\n", "no public-key"),
        ("curve\n    public-key = \"short\"\n", "line 2: public-key is not 40 Z85 characters"),
        (
            "curve\n    public-key = \"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\n",
            "line 2: value of public-key has no closing quote"
        ),
        ("curve\n   public-key = \"x\"\n", "line 2: indentation must be 4 spaces"),
    ])
    func malformedCertificates(_ text: String, _ message: String) {
        #expect(throws: Certificate.ParseError.self) { try Certificate(zpl: text) }
        do {
            _ = try Certificate(zpl: text)
        } catch {
            #expect(error.description.hasPrefix(message), "\(error)")
        }
    }

    /// The issue's example table parses; a '#' inside a key is part of the key, a line starting with '#' is a
    /// comment; roles bind keys to users.
    @Test func authorizedKeysParse() throws {
        let text = """
            # public key (Z85, 40 chars)               role      user
            Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID   user      alice
              # an indented comment
            rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7   operator

            JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6   reader
            # JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6   reader
            #JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6   reader
            a#KVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\tuser\tbob
            """
        let table = try AuthorizedKeys(parsing: text)
        #expect(table.roles.count == 4)  // commented-out key lines are comments
        // The same file with CRLF line ends (Swift reads "\r\n" as one Character) is the same table.
        #expect(try AuthorizedKeys(parsing: text.replacingOccurrences(of: "\n", with: "\r\n")) == table)
        #expect(table.role(of: try #require(CurveKey("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"))) == .user("alice".id))
        #expect(table.role(of: try #require(CurveKey("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"))) == .operator)
        #expect(table.role(of: try #require(CurveKey("JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"))) == .reader)
        #expect(table.role(of: try #require(CurveKey("a#KVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"))) == .user("bob".id))
    }

    /// A malformed line refuses the whole file with an error naming the line.
    @Test(arguments: [
        ("# ok\nnot-a-key user alice\n", "line 2: 'not-a-key' is not a public key"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\n", "line 1: a role must follow the key"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID user\n", "line 1: a user key names exactly one user"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID user bad!id\n", "line 1: 'bad!id' is not a user id"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID operator alice\n", "line 1: an operator key names no user"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID admin\n", "line 1: unknown role 'admin'"),
        ("# keys\r\n#TKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6 reader\r\n", "line 2: this key starts with '#'"),
        ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID reader alice\n", "line 1: a reader key names no user"),
        (
            "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID reader\n\nYne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID reader\n",
            "line 3: key Yne@$w-v… is listed twice"
        ),
    ])
    func malformedAuthorizedKeys(_ text: String, _ message: String) {
        do {
            _ = try AuthorizedKeys(parsing: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.description.hasPrefix(message), "\(error)")
        }
    }

    /// A certificate file is created with mode 0600 and never overwrites an existing file.
    @Test func certificateFileIsPrivateAndNeverOverwritten() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cert-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let pair = try Curve.keyPair()
        let publicKey = try #require(CurveKey(pair.publicKey))
        let secretKey = try #require(CurveKey(pair.secretKey))
        let certificate = Certificate(publicKey: publicKey, secretKey: secretKey)
        try CertificateFile.create(certificate, at: path)
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        #expect(try CertificateFile.read(path) == certificate)
        #expect(throws: CertificateFile.Failure.self) { try CertificateFile.create(certificate, at: path) }
        #expect(try CertificateFile.read(path) == certificate)  // unchanged
    }
}

extension String {
    var id: UserID { UserID(validating: self)! }
}
