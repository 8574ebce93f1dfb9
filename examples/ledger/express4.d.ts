// Express 4 under its npm alias: typed as the `express` module (the adapter uses what both share).
declare module 'express4' {
  import express from 'express';
  export default express;
}
