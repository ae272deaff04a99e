// placeholder so the model library has a source until the manifest lands.
namespace moxi::model {}
